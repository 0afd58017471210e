"""GET /analysis, GET and POST /recommendation on stored runs (both database backends)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy import select

from fp8_policy.db.session import session_scope
from fp8_policy.db.summary_models import RunSummary
from fp8_policy.policy.synthetic import SCENARIOS, write_run
from tests.conftest import wait_for_run
from tests.policy.recommend.test_recommend import KEYS
from tests.support.archives import esm2_tar_gz, tree_tar_gz


def wait_for_summary(client: TestClient, run_id: int, timeout: float = 60.0) -> None:
    """The ingest stores a ready run's summary right after `ready` (service/ingest/pipeline.py): wait for it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with session_scope(client.app.state.session_factory) as session:
            if session.scalar(select(RunSummary.run_id).where(RunSummary.run_id == run_id)) is not None:
                return
        time.sleep(0.05)
    raise AssertionError(f"run {run_id}'s summary was not stored within {timeout:g} s")


def upload_scenario(
    client: TestClient, tmp_path: Path, project: str, scenario: str, *, summary: bool = True, **changes: object
) -> int:
    """Upload a planted scenario and wait until it is ready and (with `summary`) its summary is stored."""
    run = dataclasses.replace(SCENARIOS[scenario].run, **changes) if changes else SCENARIOS[scenario].run
    write_run(run, tmp_path / scenario)
    response = client.post(
        "/api/v1/runs",
        files={"file": ("run.tgz", tree_tar_gz(tmp_path / scenario))},
        data={"project": project, "name": scenario, "metadata": '{"gpu": "H100", "recipe": "DelayedScaling"}'},
    )
    assert response.status_code == 202, response.text
    body = wait_for_run(client, response.json()["id"])
    assert body["status"] == "ready", body["error"]
    if summary:
        wait_for_summary(client, body["id"])
    return body["id"]


@pytest.fixture
def head_only(client: TestClient, tmp_path: Path, project: str) -> int:
    return upload_scenario(client, tmp_path, project, "head_only")


class TestAnalysis:
    def test_planted_head_only_is_found_with_numeric_evidence(self, client: TestClient, head_only: int) -> None:
        body = client.get(f"/api/v1/runs/{head_only}/analysis").json()
        finding = next(f for f in body["findings"] if f["pattern"] == "head_only")
        assert finding["layers"] == ["model.lm_head"] and finding["severity"] in ("critical", "severe")
        gradient = next(ev for ev in finding["evidence"] if ev["tensor"] == "gradient")
        assert gradient["max"] > 6.0 and gradient["window"][0] < gradient["window"][1]
        rows = {row["name"]: row for row in body["layers"]}
        assert rows["model.lm_head"]["severity"] == finding["severity"]
        assert all(row["severity"] == "ok" for name, row in rows.items() if name != "model.lm_head")
        assert body["thresholds"]["critical"] == 2.0

    def test_thresholds_from_the_query_change_the_outcome(self, client: TestClient, head_only: int) -> None:
        body = client.get(
            f"/api/v1/runs/{head_only}/analysis", params={"warning": 20, "critical": 30, "severe": 40}
        ).json()
        assert [f["pattern"] for f in body["findings"]] == ["healthy"]
        assert body["thresholds"]["critical"] == 30.0

    def test_inconsistent_thresholds_are_a_400(self, client: TestClient, head_only: int) -> None:
        response = client.get(f"/api/v1/runs/{head_only}/analysis", params={"critical": 9})
        assert response.status_code == 400
        assert response.json() == {"error": "InvalidThresholds", "detail": response.json()["detail"]}
        assert "warning < critical < severe" in response.json()["detail"]

    def test_unknown_parameter_is_a_400_naming_it(self, client: TestClient, head_only: int) -> None:
        response = client.get(f"/api/v1/runs/{head_only}/analysis", params={"critcal": 3})
        assert response.status_code == 400
        assert response.json()["error"] == "InvalidThresholds" and "critcal" in response.json()["detail"]

    def test_unknown_run_is_a_404(self, client: TestClient) -> None:
        response = client.get("/api/v1/runs/987654321/analysis")
        assert response.status_code == 404
        assert response.json() == {"error": "NotFound", "detail": "run 987654321 does not exist"}

    def test_real_bionemo_esm2_run_is_analysed(self, client: TestClient, project: str) -> None:
        response = client.post("/api/v1/runs", files={"file": ("esm2.tgz", esm2_tar_gz())}, data={"project": project})
        run = wait_for_run(client, response.json()["id"])
        body = client.get(f"/api/v1/runs/{run['id']}/analysis").json()
        assert len(body["layers"]) == 26 and body["findings"]
        heads = [row for row in body["layers"] if row["group"] == "head"]
        assert {row["precision"] for row in heads} == {"high"}  # lm_head ran in BF16 per the plan lines


class TestRecommendation:
    def test_json_has_every_documented_key_and_skips_the_head(self, client: TestClient, head_only: int) -> None:
        body = client.get(f"/api/v1/runs/{head_only}/recommendation").json()
        assert set(body) >= KEYS
        assert body["fp8_skip_layers"] == ["model.lm_head"]
        assert body["recipe"]["class"].startswith("transformer_engine.common.recipe.")
        # what the run trained in; changed_from names it only when the recommended recipe differs
        recipe = body["recipe"]
        assert recipe["current"] and recipe["changed_from"] == (
            recipe["current"] if recipe["current"] != recipe["name"] else None
        )
        assert 0.0 < body["confidence"] <= 1.0 and body["rationale"]

    @pytest.mark.parametrize(
        ("fmt", "media_type", "needle"),
        [
            ("te-yaml", "application/yaml", r"model\.lm_head"),
            ("megatron", "text/x-shellscript", "--fp8-recipe"),
            ("hydra", "text/plain", "fp8_layers="),
            ("torchao", "text/x-python", "'lm_head'"),
        ],
    )
    def test_every_format_renders_the_same_policy(
        self, client: TestClient, head_only: int, fmt: str, media_type: str, needle: str
    ) -> None:
        response = client.get(f"/api/v1/runs/{head_only}/recommendation", params={"format": fmt})
        assert response.status_code == 200
        assert response.headers["content-type"].startswith(media_type)
        assert "attachment; filename=" in response.headers["content-disposition"]
        assert needle in response.text

    def test_te_yaml_disables_exactly_the_skipped_layer(self, client: TestClient, head_only: int) -> None:
        text = client.get(f"/api/v1/runs/{head_only}/recommendation", params={"format": "te-yaml"}).text
        config = yaml.safe_load(text)
        disabled = [s for s in config.values() if "DisableFP8Layer" in s.get("transformer_engine", {})]
        assert [s["layers"]["layer_name_regex_pattern"] for s in disabled] == [r"^(model\.lm_head)$"]
        assert "exact_layer_names" not in text

    def test_post_overrides_recompute_without_reingesting(self, client: TestClient, head_only: int) -> None:
        before = client.get(f"/api/v1/runs/{head_only}").json()
        response = client.post(
            f"/api/v1/runs/{head_only}/recommendation",
            params={"format": "te-yaml"},
            json={"te_version": "2.13", "thresholds": {"critical": 2.5}},
        )
        assert response.status_code == 200
        assert "DisableQuantizationLayer" in response.text and "DisableFP8Layer" not in response.text
        assert client.get(f"/api/v1/runs/{head_only}").json()["finished_at"] == before["finished_at"]

    def test_overrides_raise_the_bar_and_the_skip_list_empties(self, client: TestClient, head_only: int) -> None:
        body = client.post(
            f"/api/v1/runs/{head_only}/recommendation",
            json={"thresholds": {"warning": 20, "critical": 30, "severe": 40}},
        ).json()
        assert body["fp8_skip_layers"] == [] and body["gemm_overrides"] == []

    def test_unknown_override_is_a_400(self, client: TestClient, head_only: int) -> None:
        response = client.post(f"/api/v1/runs/{head_only}/recommendation", json={"gpu": "H100", "colour": "red"})
        assert response.status_code == 400
        assert response.json()["error"] == "InvalidOverrides" and "colour" in response.json()["detail"]

    def test_unknown_format_is_a_400(self, client: TestClient, head_only: int) -> None:
        response = client.get(f"/api/v1/runs/{head_only}/recommendation", params={"format": "xml"})
        assert response.status_code == 400
        assert response.json()["error"] == "UnknownFormat"

    def test_a_failed_run_has_no_recommendation(self, client: TestClient, project: str) -> None:
        response = client.post(
            "/api/v1/runs",
            content=b"not an archive at all",
            headers={"Content-Type": "application/gzip"},
            params={"project": project},
        )
        run = wait_for_run(client, response.json()["id"])
        answer = client.get(f"/api/v1/runs/{run['id']}/recommendation")
        assert answer.status_code == 409
        assert answer.json()["error"] == "NotReady" and "NotAnArchive" in answer.json()["detail"]
