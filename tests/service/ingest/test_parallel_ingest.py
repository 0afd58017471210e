"""Parallel training jobs through the upload API: TP / PP / VPP / DP / EP jobs as Megatron + TE log them
(policy/synthetic/parallel.py: Megatron's rank order, local blocks or `layer_number`, DP replicas identical, TP
shards their own), on SQLite and PostgreSQL. Stored layer names are global, replicas are stored once and answer
for their ranks, a replica that disagrees is named, bad input is named in `ingest_report.parallel`."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from fp8_policy.db.run_models import Layer, Run, Series
from fp8_policy.policy.parallel import GLOBAL, LAYER_NUMBER, LOCAL, ParallelLayout
from fp8_policy.policy.synthetic.parallel import ParallelJob, WrittenJob, write_parallel_job
from fp8_policy.policy.synthetic.run import SyntheticRun
from tests.conftest import upload, wait_for_run
from tests.support.archives import tree_tar_gz

BLOCKS = "model.module.decoder.layers"


def _meta(layout: ParallelLayout, **extra: object) -> dict[str, object]:
    return {
        "tensor_model_parallel_size": layout.tp,
        "pipeline_model_parallel_size": layout.pp,
        "virtual_pipeline_model_parallel_size": layout.vpp,
        "expert_model_parallel_size": layout.ep,
        "num_layers": layout.num_layers,
        "world_size": layout.world_size,
        **extra,
    }


def _job(layout: ParallelLayout, family: str = "megatron", **options: object) -> ParallelJob:
    run = SyntheticRun(family=family, num_layers=layout.num_layers or 8, first_index=0, iterations=40, freq=10)
    return ParallelJob(run, layout, **options)  # type: ignore[arg-type]


def _ingest(client: TestClient, project: str, tree: Path, metadata: dict[str, object] | None) -> dict:
    fields = {"metadata": json.dumps(metadata)} if metadata is not None else {}
    response = upload(client, tree_tar_gz(tree), project, **fields)
    assert response.status_code == 202, response.text
    run = wait_for_run(client, response.json()["id"])
    assert run["status"] == "ready", run["error"]
    return run


def _whole_model(written: WrittenJob, naming: str) -> set[str]:
    """Every layer the job logged, under its global name in the logs' own spelling (`layer_number`: 1-based)."""
    names = {whole for mapping in written.logged_to_global.values() for whole in mapping.values()}
    if naming != LAYER_NUMBER:
        return names
    out = set()
    for name in names:
        head, _sep, rest = name.partition(f"{BLOCKS}.")
        block, _dot, tail = rest.partition(".")
        out.add(f"{BLOCKS}.{int(block) + 1}.{tail}" if head == "" and block.isdigit() else name)
    return out


def _stored(engine: Engine, run_id: int) -> tuple[set[str], set[int], dict[str, str]]:
    """(layer names, ranks with stored series, layer -> precision) of a run, read behind the API's back."""
    with Session(engine) as session:
        layers = {la.name: la.precision for la in session.scalars(select(Layer).where(Layer.run_id == run_id))}
        ranks = set(session.scalars(select(Series.rank).where(Series.run_id == run_id).distinct()))
    return set(layers), ranks, layers


def _lines(written: WrittenJob) -> int:
    return sum(f.stats_lines for f in written.files)


@pytest.mark.parametrize("naming", [LOCAL, LAYER_NUMBER])
def test_a_tp_pp_dp_job_is_stored_under_global_names_with_replicas_once_and_its_faulty_replica_named(
    client: TestClient, db_engine: Engine, project: str, tmp_path: Path, naming: str
) -> None:
    layout = ParallelLayout(tp=2, pp=2, dp=3, num_layers=8)
    written = write_parallel_job(_job(layout, naming=naming, faulty={7: 1.5}), tmp_path / "logs")
    run = _ingest(client, project, tmp_path / "logs", _meta(layout))

    names, ranks, precision = _stored(db_engine, run["id"])
    assert names == _whole_model(written, naming)  # 8 global blocks, not 4 local ones on two stages
    assert set(precision.values()) == {"fp8"}  # every block's own plan lines, renamed before the merge
    report = run["ingest_report"]["parallel"]
    # per (tp, pp) shard its first rank, and the faulty replica 7 apart from 9 and 11 (tp 1 of stage 1)
    assert ranks == {0, 1, 6, 7, 9}
    assert (run["ranks"], run["ranks_stored"], report["replicas"]) == (12, 5, 7)
    assert (report["source"], report["naming"], report["exact"], report["layout"]) == (
        "metadata",
        naming,
        True,
        "TP2 x PP2 x DP3",
    )
    assert [(m["differing"], m["agreeing"]) for m in report["mismatches"]] == [([7], [9, 11])]
    assert run["lines_read"] == _lines(written)  # nothing lost: every rank's lines are counted

    block = f"{BLOCKS}.{5 if naming == LOCAL else 6}.mlp.linear_fc2"  # a stage-1 block
    query = {"layer": block, "tensor": "activation", "stat": "underflows%"}
    replica = client.get(f"/api/v1/runs/{run['id']}/series", params={**query, "rank": 11}).json()
    stored = client.get(f"/api/v1/runs/{run['id']}/series", params={**query, "rank": 9}).json()
    assert replica["series"][0]["rank"] == 11
    assert replica["series"][0]["values"] == stored["series"][0]["values"]  # rank 11 repeats rank 9
    csv = {rank: client.get(f"/api/v1/runs/{run['id']}/metrics.csv", params={"rank": rank}).text for rank in (9, 11)}
    assert csv[11].splitlines()[1].startswith("11,1,1,2,")  # the rank asked for, with its own coordinates
    rows = {rank: [line.split(",", 6)[6] for line in text.splitlines()[1:]] for rank, text in csv.items()}
    assert rows[11] == rows[9]  # the same points: rank 11 repeats rank 9
    layers = client.get(f"/api/v1/runs/{run['id']}/layers", params={"rank": 11}).json()
    stage_1 = range(4, 8) if naming == LOCAL else range(5, 9)  # global 0-based, or layer_number's 1-based
    assert {la["name"] for la in layers if la["stats"]} == {n for n in names if int(n.split(".")[4]) in stage_1}
    heatmap = client.get(f"/api/v1/runs/{run['id']}/heatmap.json", params={"rank": 11})
    assert heatmap.status_code == 200, heatmap.text
    assert client.get(f"/api/v1/runs/{run['id']}/heatmap.json", params={"rank": 12}).status_code == 400
    with Session(db_engine) as session:
        stored_info = session.get(Run, run["id"]).parallel
    assert stored_info["replicas"]["11"] == 9 and stored_info["ranks"]["11"] == {
        "tp": 1,
        "pp": 1,
        "dp": 2,
        "ep": 0,
        "cp": 0,
    }


def test_virtual_pipeline_stages_numbered_by_layer_number_are_global(
    client: TestClient, db_engine: Engine, project: str, tmp_path: Path
) -> None:
    layout = ParallelLayout(tp=1, pp=2, dp=2, vpp=2, num_layers=8)
    written = write_parallel_job(_job(layout, naming=LAYER_NUMBER), tmp_path / "logs")
    run = _ingest(client, project, tmp_path / "logs", _meta(layout))

    names, ranks, _ = _stored(db_engine, run["id"])
    assert names == _whole_model(written, LAYER_NUMBER)
    assert (ranks, run["ranks"], run["ranks_stored"]) == ({0, 2}, 4, 2)
    assert run["ingest_report"]["parallel"]["exact"] is True


def test_experts_of_every_expert_parallel_rank_get_their_global_numbers(
    client: TestClient, db_engine: Engine, project: str, tmp_path: Path
) -> None:
    layout = ParallelLayout(tp=1, pp=2, dp=2, ep=2, num_layers=4, num_moe_experts=8)
    written = write_parallel_job(_job(layout, family="megatron_moe", naming=LOCAL), tmp_path / "logs")
    run = _ingest(client, project, tmp_path / "logs", _meta(layout, num_moe_experts=8))

    names, ranks, _ = _stored(db_engine, run["id"])
    assert names == _whole_model(written, LOCAL)
    assert {n.rsplit("_", 1)[1] for n in names if ".gemm_" in n} == {str(e) for e in range(8)}
    assert ranks == {0, 1, 2, 3}  # each (pp, ep) holds its own experts: no replica among them
    assert run["ingest_report"]["parallel"]["mismatches"] == []


def test_statistics_logged_per_rank_are_no_fault_and_every_rank_is_stored(
    client: TestClient, db_engine: Engine, project: str, tmp_path: Path
) -> None:
    layout = ParallelLayout(tp=1, pp=2, dp=3, num_layers=4)
    write_parallel_job(_job(layout, naming=LOCAL, reduction="none"), tmp_path / "logs")
    run = _ingest(client, project, tmp_path / "logs", _meta(layout))

    report = run["ingest_report"]["parallel"]
    assert (report["unreduced"], report["mismatches"], report["replicas"]) == (True, [], 0)
    assert _stored(db_engine, run["id"])[1] == set(range(6))


def test_data_parallel_reduction_leaves_tensor_parallel_shards_apart_and_finds_no_fault(
    client: TestClient, db_engine: Engine, project: str, tmp_path: Path
) -> None:
    layout = ParallelLayout(tp=2, pp=1, dp=2, num_layers=4)
    write_parallel_job(_job(layout, reduction="dp"), tmp_path / "logs")
    run = _ingest(client, project, tmp_path / "logs", _meta(layout))

    report = run["ingest_report"]["parallel"]
    assert (report["mismatches"], report["unreduced"], run["ranks_stored"]) == ([], False, 2)
    assert not any("cannot say which" in note for note in report["notes"])


def test_without_a_layout_local_names_stay_as_logged_and_the_run_says_the_layout_is_unknown(
    client: TestClient, db_engine: Engine, project: str, tmp_path: Path
) -> None:
    layout = ParallelLayout(tp=1, pp=2, dp=1, num_layers=8)
    write_parallel_job(_job(layout, naming=LOCAL), tmp_path / "logs")
    run = _ingest(client, project, tmp_path / "logs", None)

    report = run["ingest_report"]["parallel"]
    assert (report["source"], report["exact"]) == ("unknown", False)
    assert any("pipeline stages named locally" in note for note in report["notes"])
    assert {int(n.split(".")[4]) for n in _stored(db_engine, run["id"])[0]} == {0, 1, 2, 3}


def test_ranks_parsed_by_their_own_jobs_store_what_the_scan_would_have(
    client: TestClient, db_engine: Engine, project: str, tmp_path: Path
) -> None:
    """Past the scan's memory budget ranks get jobs of their own; the stored run is the same (finalize drops the
    replicas they stored), and the metadata logs told the naming."""
    layout = ParallelLayout(tp=1, pp=2, dp=3, num_layers=8)
    write_parallel_job(_job(layout, naming=LOCAL, faulty={5: 2.0}), tmp_path / "logs")
    scanned = _ingest(client, f"{project}-scan", tmp_path / "logs", _meta(layout))
    worker = client.app.state.ingest  # the same worker, now keeping 1 byte of parsed arrays while it scans
    worker.context = replace(worker.context, settings=worker.settings.model_copy(update={"scan_parse_bytes": 1}))
    jobs = _ingest(client, f"{project}-jobs", tmp_path / "logs", _meta(layout))

    def stored(run: dict) -> tuple:
        with Session(db_engine) as session:
            rows = session.execute(
                select(Series.rank, Layer.name, Series.tensor, Series.stat_key, Series.values)
                .join(Layer, Layer.id == Series.layer_id)
                .where(Series.run_id == run["id"])
            )
            return sorted(map(tuple, rows))

    assert stored(jobs) == stored(scanned)
    a, b = scanned["ingest_report"]["parallel"], jobs["ingest_report"]["parallel"]
    assert (b["parsed_in_scan"], b["parsed_by_rank_jobs"]) == (1, 5)
    assert (b["ranks_stored"], b["replicas"], b["mismatches"]) == (a["ranks_stored"], a["replicas"], a["mismatches"])
    assert b["naming"] == "local" and any("metadata logs' 'Assigned layer name'" in n for n in b["notes"])


class TestBadInput:
    def test_missing_ranks_and_a_truncated_rank_file_are_named_and_nothing_is_lost(
        self, client: TestClient, db_engine: Engine, project: str, tmp_path: Path
    ) -> None:
        layout = ParallelLayout(tp=1, pp=2, dp=3, num_layers=4)
        written = write_parallel_job(_job(layout, naming=LOCAL), tmp_path / "logs")
        for rank in (2, 5):
            for path in (written.files[rank].stats_path, written.files[rank].metadata_path):
                path.unlink()
        cut = written.files[4].stats_path
        data = cut.read_bytes()
        cut.write_bytes(data[: len(data) * 3 // 4 + 7])  # ends mid-line, a quarter of its iterations gone
        run = _ingest(client, project, tmp_path / "logs", _meta(layout))

        report = run["ingest_report"]["parallel"]
        assert (report["missing_ranks"], run["ranks"]) == ([2, 5], 4)
        assert list(report["ends_early"]) == ["4"] and report["mismatches"] == []
        assert 4 in _stored(db_engine, run["id"])[1]  # stored as logged, not dropped as a replica

    def test_a_world_size_that_does_not_match_the_layout_is_named(
        self, client: TestClient, project: str, tmp_path: Path
    ) -> None:
        layout = ParallelLayout(tp=1, pp=2, dp=2, num_layers=4)
        write_parallel_job(_job(layout, naming=GLOBAL), tmp_path / "logs")
        run = _ingest(client, project, tmp_path / "logs", {**_meta(layout), "world_size": 2, "data_parallel_size": 1})

        report = run["ingest_report"]["parallel"]
        assert (report["outside_ranks"], report["source"], run["ranks"]) == ([2, 3], "inferred", 4)
        assert "the world size contradicts the logs" in report["notes"][0]

    def test_two_ranks_claiming_the_same_coordinates_are_named(
        self, client: TestClient, project: str, tmp_path: Path
    ) -> None:
        layout = ParallelLayout(tp=1, pp=2, dp=2, num_layers=4)
        written = write_parallel_job(_job(layout, naming=LOCAL, record_layout=True), tmp_path / "logs")
        meta = written.files[3].metadata_path
        meta.write_text(meta.read_text().replace('"dp_rank": 1', '"dp_rank": 0'))  # rank 3 says it is rank 2
        run = _ingest(client, project, tmp_path / "logs", None)

        report = run["ingest_report"]["parallel"]
        assert report["duplicate_coordinates"] == [[2, 3]]
        assert any("ranks 2, 3 all claim" in note for note in report["notes"])
