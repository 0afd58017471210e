"""One pipeline stage's TE debug YAML over the API and the CLI (`?pp_stage=K`, `fp8-policy recommend --pp-stage K`),
the refusals that say which stages exist, and the layout in the analysis and recommendation JSON (both databases).

The run is stored as the ingest stores a job whose stages named their blocks locally: every rank's layer names
rewritten to global ones (the logs here are written with global numbers, which is what that rewrite gives) and the
resolved layout in `runs.parallel` (set here, with the summary computed before it dropped so that it is computed
again from the run as stored).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml
from click.testing import CliRunner
from fastapi.testclient import TestClient
from sqlalchemy import delete

from fp8_policy.client import PolicyClient
from fp8_policy.client.cli import cli
from fp8_policy.db.run_models import Run
from fp8_policy.db.session import session_scope
from fp8_policy.db.summary_models import RunSummary
from fp8_policy.policy.parallel import GLOBAL, LOCAL, METADATA, ParallelInfo, ParallelLayout, rank_coord
from fp8_policy.policy.synthetic import Scenario, SyntheticRun, all_of, blocks, level, roles
from fp8_policy.policy.synthetic.parallel import ParallelJob, write_parallel_job
from tests.conftest import wait_for_run
from tests.service.analysis.test_analysis_api import wait_for_summary
from tests.support.archives import tree_tar_gz

LAYOUT = ParallelLayout(pp=2, dp=2, num_layers=8)
FAILING = "model.module.decoder.layers.3.mlp.linear_fc2"


@pytest.fixture
def staged_run(client: TestClient, tmp_path: Path, project: str) -> int:
    """A TP1 x PP2 x DP2 job, global block 3's fc2 failing, named locally by its stages (see the module docstring)."""
    profile = Scenario()
    for tensor in ("activation", "gradient"):
        profile = profile.plant(all_of(blocks(3), roles("fc2")), tensor, "underflows%", level(6.0))
    run = SyntheticRun(family="megatron", num_layers=8, first_index=0, iterations=200, profile=profile)
    write_parallel_job(ParallelJob(run, LAYOUT, naming=GLOBAL), tmp_path / "logs")
    response = client.post(
        "/api/v1/runs",
        files={"file": ("job.tgz", tree_tar_gz(tmp_path / "logs"))},
        data={"project": project, "name": "pp2", "metadata": '{"pipeline_model_parallel_size": 2, "num_layers": 8}'},
    )
    assert response.status_code == 202, response.text
    run_id = int(response.json()["id"])
    assert wait_for_run(client, run_id)["status"] == "ready"
    wait_for_summary(client, run_id)
    info = ParallelInfo(METADATA, LAYOUT, LOCAL, {r: rank_coord(LAYOUT, r).as_dict() for r in range(4)})
    with session_scope(client.app.state.session_factory) as session:
        stored = session.get(Run, run_id)
        assert stored is not None
        stored.parallel = info.to_json()
        session.execute(delete(RunSummary).where(RunSummary.run_id == run_id))
    return run_id


def _path(run_id: int) -> str:
    return f"/api/v1/runs/{run_id}/recommendation"


def _disabled(content: str) -> str:
    return str(yaml.safe_load(content)["fp8_disabled_layers"]["layers"]["layer_name_regex_pattern"])


def test_each_stage_gets_its_own_yaml_in_its_local_names(client: TestClient, staged_run: int) -> None:
    for fmt in ("te-yaml", "te-monitor"):
        refused = client.get(_path(staged_run), params={"format": fmt})
        assert refused.status_code == 400
        body = refused.json()
        assert set(body) == {"error", "detail"} and body["error"] == "PipelineStageRequired"
        assert "pp_stage=K with K from 0 to 1" in body["detail"] and "--pp-stage K" in body["detail"]
    first = client.get(_path(staged_run), params={"format": "te-yaml", "pp_stage": "0"})
    assert first.status_code == 200, first.text
    assert 'filename="fp8_debug_config.pp0.yaml"' in first.headers["content-disposition"]
    assert "Pipeline stage 0 of TP1 x PP2 x DP2" in first.text
    assert _disabled(first.text) == r"^(model\.module\.decoder\.layers\.3\.mlp\.linear_fc2)$"
    second = client.get(_path(staged_run), params={"format": "te-yaml", "pp_stage": "1"})
    assert second.status_code == 200 and "fp8_disabled_layers" not in second.text
    assert "global blocks 4-7, named by their index on this stage (0-3)" in second.text
    monitor = client.get(_path(staged_run), params={"format": "te-monitor", "pp_stage": "0"})
    assert monitor.status_code == 200 and "layers\\.3\\.mlp\\.linear_fc2" in monitor.text
    posted = client.post(_path(staged_run), params={"format": "te-yaml", "pp_stage": "0"}, json={"te_version": "2.13"})
    assert posted.status_code == 200 and "DisableQuantizationLayer" in posted.text


@pytest.mark.parametrize(
    ("params", "said"),
    [
        ({"format": "te-yaml", "pp_stage": "2"}, "stages 0 to 1"),
        ({"format": "te-yaml", "pp_stage": "-1"}, "from 0 to 65536"),
        ({"format": "te-yaml", "pp_stage": "x"}, "from 0 to 65536"),
        ({"format": "te-yaml", "pp_stage": "99999999999999999999"}, "from 0 to 65536"),
        ({"format": "megatron", "pp_stage": "0"}, "one answer for every stage"),
        ({"format": "json", "pp_stage": "0"}, "one answer for every stage"),
    ],
)
def test_a_stage_the_job_or_format_does_not_have_is_a_400(
    client: TestClient, staged_run: int, params: dict[str, str], said: str
) -> None:
    response = client.get(_path(staged_run), params=params)
    assert response.status_code == 400 and response.json()["error"] == "InvalidParameter"
    assert said in response.json()["detail"]


def test_the_json_carries_the_layout_and_global_names(client: TestClient, staged_run: int) -> None:
    rec = client.get(_path(staged_run)).json()
    assert rec["fp8_skip_layers"] == [FAILING]
    assert rec["parallel"]["stages"] == [[[0, 4]], [[4, 8]]] and rec["parallel"]["naming"] == "local"
    assert rec["formats"]["megatron"]["exact"] is False and rec["megatron"]["precision_config_also_hits"] == [7]
    analysis = client.get(f"/api/v1/runs/{staged_run}/analysis").json()
    assert analysis["parallel"]["pp"] == 2 and analysis["parallel"]["ranks"]["2"]["pp"] == 1
    assert any(FAILING in f["layers"] for f in analysis["findings"])


def test_the_cli_writes_one_stage_file(client: TestClient, staged_run: int, tmp_path: Path) -> None:
    def forward(request: httpx.Request) -> httpx.Response:
        answer = client.request(request.method, request.url.raw_path.decode(), content=request.content)
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    with PolicyClient("http://fp8.test", transport=httpx.MockTransport(forward)) as policy:
        out = tmp_path / "stage0.yaml"
        args = ["recommend", str(staged_run), "--format", "te-yaml", "--pp-stage", "0", "-o", str(out)]
        result = CliRunner().invoke(cli, args, obj=policy)
        assert result.exit_code == 0, result.output
        assert _disabled(out.read_text()) == r"^(model\.module\.decoder\.layers\.3\.mlp\.linear_fc2)$"
        refused = CliRunner().invoke(cli, ["recommend", str(staged_run), "--format", "te-yaml"], obj=policy)
        assert refused.exit_code == 2 and "PipelineStageRequired" in refused.output and "--pp-stage" in refused.output
        assert policy.monitor_config(staged_run, pp_stage=1).count("fp8_disabled") == 0


def test_the_csv_has_each_rank_s_coordinates(client: TestClient, staged_run: int) -> None:
    response = client.get(f"/api/v1/runs/{staged_run}/metrics.csv", params={"rank": 2})
    assert response.status_code == 200
    lines = response.text.splitlines()
    assert lines[0] == "rank,tp,pp,dp,ep,cp,layer,tensor,recipe,stat,iteration,value"
    rows = [line.split(",") for line in lines[1:]]
    assert rows and all(row[:6] == ["2", "0", "1", "0", "0", "0"] for row in rows)
    assert {int(row[6].split(".")[4]) for row in rows} == {4, 5, 6, 7}  # stage 1's global blocks
    plain = client.get(f"/api/v1/runs/{staged_run}/metrics.csv", params={"layout": "bionemo", "rank": 0})
    assert plain.text.splitlines()[0] == "metric_name,iteration,value"


def test_a_tracker_hand_off_keeps_one_te_yaml_per_stage(client: TestClient, staged_run: int) -> None:
    """The MLflow / W&B hand-off keeps its configs with the run first: a job named locally per stage gets one TE
    debug YAML per stage (each in its stage's names), not a 400 that loses the whole hand-off."""
    from fp8_policy.client.trackers import keep_for_hand_off

    def forward(request: httpx.Request) -> httpx.Response:
        kind = {"content-type": request.headers["content-type"]} if "content-type" in request.headers else {}
        answer = client.request(request.method, request.url.raw_path.decode(), content=request.content, headers=kind)
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    with PolicyClient("http://fp8.test", transport=httpx.MockTransport(forward)) as policy:
        kept = keep_for_hand_off(policy, staged_run, ("json", "te-yaml", "megatron"))
        names = sorted(item["filename"] for item in kept)
        assert names == sorted(
            ["fp8_debug_config.pp0.yaml", "fp8_debug_config.pp1.yaml", *(i["filename"] for i in kept[:2])]
        )
        by_name = {item["filename"]: item for item in kept}
        stage0 = policy.config_content(staged_run, by_name["fp8_debug_config.pp0.yaml"]["id"]).decode()
        stage1 = policy.config_content(staged_run, by_name["fp8_debug_config.pp1.yaml"]["id"]).decode()
        assert _disabled(stage0) == r"^(model\.module\.decoder\.layers\.3\.mlp\.linear_fc2)$"  # global 3 = stage 0's 3
        assert "fp8_disabled" not in stage1
