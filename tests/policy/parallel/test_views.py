"""Every view of a pipeline-parallel job in global names, from the logs Megatron + TE write (write_parallel_job, read
back as the ingest stores them: tests/policy/parallel/job_data.py).

The failing block sits on stage 0 in the middle of the model (global block 3 of 8 under PP2): the analysis, skip list,
ladder, heatmap rows, compare and gate name it globally; Megatron's precision-config glob states that it also hits
block 7; the TE debug YAML is one file under layer_number names and one file per stage (in the stage's local names)
under local names, checked against the names the real nvdlfw_inspect gives each stage's modules.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from fp8_policy.client.gate import evaluate
from fp8_policy.policy.analysis import analyze
from fp8_policy.policy.compare.recommendations import compare_recommendations
from fp8_policy.policy.heatmap import build_matrix
from fp8_policy.policy.parallel import LAYER_NUMBER, LOCAL, ParallelLayout
from fp8_policy.policy.recommend import recommend
from fp8_policy.policy.render import FORMATS, RenderOptions, pipeline, render
from fp8_policy.policy.synthetic import Scenario, SyntheticRun, all_of, blocks, level, roles
from fp8_policy.policy.synthetic.parallel import ParallelJob
from tests.policy.parallel.job_data import JobData, job_run_data
from tests.policy.parallel.megatron_chunks import stage_names

BLOCKS = "model.module.decoder.layers"
LAYOUT = ParallelLayout(pp=2, dp=2, num_layers=8)
META = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 2, "num_layers": 8, "world_size": 4}


def _failing(*ordinals: int, whole: bool = False) -> Scenario:
    where = blocks(*ordinals) if whole else all_of(blocks(*ordinals), roles("fc2"))
    scenario = Scenario()
    for tensor in ("activation", "gradient"):
        scenario = scenario.plant(where, tensor, "underflows%", level(6.0))
    return scenario


def _job(tmp: Path, naming: str, profile: Scenario, meta: dict | None = META, **kwargs: object) -> JobData:
    run = SyntheticRun(family="megatron", num_layers=8, first_index=0, iterations=200, profile=profile)
    return job_run_data(ParallelJob(run, LAYOUT, naming=naming, **kwargs), tmp, meta)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def middle(tmp_path_factory: pytest.TempPathFactory) -> dict[str, JobData]:
    root = tmp_path_factory.mktemp("middle")
    return {naming: _job(root / naming, naming, _failing(3)) for naming in (LAYER_NUMBER, LOCAL)}


def _name(naming: str, block: int, sub: str = "mlp.linear_fc2") -> str:
    """The global name of 0-based block `block` as the run stores it (layer_number: 1-based)."""
    return f"{BLOCKS}.{block + (1 if naming == LAYER_NUMBER else 0)}.{sub}"


@pytest.mark.parametrize("naming", [LAYER_NUMBER, LOCAL])
def test_analysis_names_the_global_block_and_carries_the_layout(middle: dict[str, JobData], naming: str) -> None:
    data = middle[naming].run
    analysis = analyze(data)
    body = analysis.to_dict()
    failing = [f for f in analysis.findings if f.severity.value in ("critical", "severe")]
    assert {layer for f in failing for layer in f.layers} == {_name(naming, 3)}
    parallel = body["parallel"]
    assert (parallel["tp"], parallel["pp"], parallel["dp"], parallel["source"], parallel["naming"]) == (
        1,
        2,
        2,
        "metadata",
        naming,
    )
    assert parallel["exact"] is True and parallel["order"] == "tp-cp-ep-dp-pp"
    assert parallel["ranks"]["3"] == {"tp": 0, "pp": 1, "dp": 1, "ep": 0, "cp": 0}
    assert parallel["replicas"] == {"1": 0, "3": 2}
    rows = {row["name"]: row for row in body["layers"]}
    assert len([n for n in rows if n.endswith("linear_fc2")]) == 8  # every global block, none collided
    assert rows[_name(naming, 3)]["verdict"] in ("critical", "severe")
    assert rows[_name(naming, 7)]["verdict"] == "ok"
    matrix = build_matrix(list(data.layers.values()), [s for s in data.series if s.metric.stat == "underflows%"])
    assert {row.layer for row in matrix.rows} == set(data.layers)  # heatmap rows: one per global layer


@pytest.mark.parametrize("naming", [LAYER_NUMBER, LOCAL])
def test_skip_list_ladder_and_gate_in_global_names(middle: dict[str, JobData], naming: str) -> None:
    data = middle[naming].run
    analysis = analyze(data)
    rec = recommend(data, analysis).to_dict()
    assert rec["fp8_skip_layers"] == [_name(naming, 3)]
    assert rec["precision_ladder"]["layers"][_name(naming, 3)]["precision"] == "bf16"
    assert _name(naming, 7) in rec["precision_ladder"]["layers"]
    gate = evaluate({"id": 1, "name": "pp"}, analysis.to_dict(), rec, "critical")
    assert not gate.passed and gate.failing_layers == [_name(naming, 3)]
    assert rec["parallel"]["stages"] == [[[0, 4]], [[4, 8]]]
    assert rec["parallel"]["block_base"] == (1 if naming == LAYER_NUMBER else 0)


@pytest.mark.parametrize("naming", [LAYER_NUMBER, LOCAL])
def test_megatron_glob_states_the_blocks_it_takes_along(middle: dict[str, JobData], naming: str) -> None:
    rec = recommend(middle[naming].run)
    body = rec.to_dict()
    section, applied = body["megatron"], body["formats"]["megatron"]
    assert not section["first_last_layers_bf16"] and section["blocks_needing_precision_config"] == [3]
    assert section["precision_config_also_hits"] == [7]
    assert any("local block index" in note for note in section["notes"])
    assert applied["exact"] is False and applied["extra_bf16_layers"] == [_name(naming, 7)]
    assert "te-yaml" in applied["approximation"] and "custom recipe" in applied["approximation"]
    script = render(rec.decision, "megatron").content
    assert script.count("pattern: 'decoder.layers.3.mlp.linear_fc2'") == 1
    assert "also hits global block(s) 7" in script
    assert body["formats"]["te-yaml"]["exact"] is True


def test_edge_blocks_use_the_global_flags_exactly(tmp_path: Path) -> None:
    data = _job(tmp_path, LOCAL, _failing(7, whole=True)).run
    body = recommend(data).to_dict()
    assert body["fp8_skip_layers"] == [f"{BLOCKS}.7.{s}" for s in _SUBS]
    assert body["megatron"]["num_layers_at_end_in_bf16"] == 1 and body["megatron"]["num_layers_at_start_in_bf16"] == 0
    assert body["formats"]["megatron"]["exact"] is True and not body["formats"]["megatron"]["extra_bf16_layers"]
    assert any("count global blocks" in note for note in body["megatron"]["notes"])


_SUBS = ("self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2")


def _disabled(content: str) -> re.Pattern[str]:
    sections = yaml.safe_load(content)
    return re.compile(sections["fp8_disabled_layers"]["layers"]["layer_name_regex_pattern"])


@pytest.mark.parametrize("fmt", ["te-yaml", "te-monitor"])
def test_local_names_need_one_file_per_stage(middle: dict[str, JobData], fmt: str, tmp_path: Path) -> None:
    decision = recommend(middle[LOCAL].run).decision
    with pytest.raises(pipeline.PipelineStageRequired, match=r"pp_stage=K with K from 0 to 1"):
        render(decision, fmt)
    with pytest.raises(pipeline.InvalidPipelineStage, match="stages 0 to 1"):
        render(decision, fmt, RenderOptions(pp_stage=2))
    for stage in (0, 1):
        rendered = render(decision, fmt, RenderOptions(pp_stage=stage))
        assert rendered.filename.endswith(f".pp{stage}.yaml")
        if fmt == "te-monitor":
            continue
        names = stage_names(LAYOUT, stage, numbered=False, log_dir=tmp_path / str(stage))
        hit = {name for name in names if _disabled(rendered.content).search(name)} if stage == 0 else set()
        if stage == 1:
            assert "fp8_disabled_layers" not in rendered.content
        assert hit == ({"model.module.decoder.layers.3.mlp.linear_fc2"} if stage == 0 else set())


def test_layer_number_names_need_one_file(middle: dict[str, JobData], tmp_path: Path) -> None:
    decision = recommend(middle[LAYER_NUMBER].run).decision
    content = render(decision, "te-yaml").content
    assert "exact on every stage" in content
    for stage in (0, 1):
        names = stage_names(LAYOUT, stage, numbered=True, log_dir=tmp_path / str(stage))
        hit = {name for name in names if _disabled(content).search(name)}
        assert hit == ({f"{BLOCKS}.4.mlp.linear_fc2"} if stage == 0 else set())
    assert render(decision, "te-yaml", RenderOptions(pp_stage=1)).content.count("layers\\.4\\.mlp") >= 1
    with pytest.raises(pipeline.InvalidPipelineStage, match="te-yaml and te-monitor"):
        render(decision, "megatron", RenderOptions(pp_stage=0))


def test_compare_speaks_global_names(middle: dict[str, JobData], tmp_path: Path) -> None:
    base = recommend(middle[LOCAL].run)
    head = recommend(_job(tmp_path, LOCAL, _failing(6)).run)
    diff = compare_recommendations(base, head)
    text = repr(diff)
    assert f"{BLOCKS}.3.mlp.linear_fc2" in text and f"{BLOCKS}.6.mlp.linear_fc2" in text


def test_one_stage_failing_is_not_outvoted_by_the_others(tmp_path: Path) -> None:
    """The issue's TP2 x PP4 x DP2 job: fc2 of global block 9 (stage 2, local block 1) fails; the other stages' local
    block 1 are healthy. Named globally, nothing outvotes it."""
    layout = ParallelLayout(tp=2, pp=4, dp=2, num_layers=16)
    meta = {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 4, "num_layers": 16, "world_size": 16}
    run = SyntheticRun(family="megatron", num_layers=16, first_index=0, iterations=200, profile=_failing(9))
    data = job_run_data(ParallelJob(run, layout, naming=LOCAL), tmp_path, meta).run
    rec = recommend(data).to_dict()
    assert rec["fp8_skip_layers"] == [f"{BLOCKS}.9.mlp.linear_fc2"]
    assert sorted({s.rank for s in data.series}) == [0, 1, 4, 5, 8, 9, 12, 13]  # DP replicas stored once


def test_unknown_layout_is_said_and_nothing_claims_exact(tmp_path: Path) -> None:
    """Local names, no layout in the metadata and none recorded: the logs cannot tell stages from shards."""
    data = _job(tmp_path, LOCAL, _failing(3), meta=None).run
    analysis = analyze(data)
    body = analysis.to_dict()
    assert body["parallel"]["source"] == "unknown" and body["parallel"]["exact"] is False
    assert any("pipeline parallelism" in note for note in body["notes"])
    rec = recommend(data, analysis).to_dict()
    assert all(rec["formats"][fmt]["exact"] is False for fmt in FORMATS)
    assert all("layout is unknown" in rec["formats"][fmt]["approximation"] for fmt in FORMATS)
    assert rec["parallel"]["exact"] is False and "pipeline parallelism" in rec["parallel"]["caveat"]
    assert "layout is unknown" in render(recommend(data).decision, "te-yaml").content.splitlines()[1]


def test_a_layout_the_ranks_recorded_is_used(tmp_path: Path) -> None:
    data = _job(tmp_path, LOCAL, _failing(3), meta=None, record_layout=True).run
    assert data.parallel is not None and (data.parallel.source, data.parallel.naming) == ("metadata", LOCAL)
    assert recommend(data).to_dict()["fp8_skip_layers"] == [f"{BLOCKS}.3.mlp.linear_fc2"]


def test_local_names_under_virtual_stages_collide_and_nothing_claims_exact(tmp_path: Path) -> None:
    """PP2 x VPP2 with blocks named per chunk: the chunks of every stage log the same names (no rewrite can tell
    them apart), said in the notes and in every format."""
    layout = ParallelLayout(pp=2, dp=1, vpp=2, num_layers=8)
    run = SyntheticRun(family="megatron", num_layers=8, first_index=0, iterations=200, profile=_failing(3))
    meta = {**META, "virtual_pipeline_model_parallel_size": 2, "world_size": 2}
    data = job_run_data(ParallelJob(run, layout, naming=LOCAL), tmp_path, meta).run
    analysis = analyze(data)
    body = analysis.to_dict()
    assert body["parallel"]["naming"] == LOCAL and body["parallel"]["exact"] is False
    assert any("virtual pipeline stages" in note for note in body["notes"])
    rec = recommend(data, analysis).to_dict()
    assert all(rec["formats"][fmt]["exact"] is False for fmt in FORMATS)
    assert rec["parallel"]["caveat"] and rec["parallel"]["exact"] is False
    render(recommend(data).decision, "te-yaml")  # one (approximate) file: a stage would not tell chunks apart
