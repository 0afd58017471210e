"""GET /recommendation without options answers from the run's summary, stored once at ingest: no reader (in any
API process, or after a restart) computes it, and the stored answer is byte for byte the computed one. Any option,
another policy version or changed metadata is computed as before (both backends)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select, update

from fp8_policy.db.run_models import Run
from fp8_policy.db.session import session_scope
from fp8_policy.db.summary_models import RunSummary
from fp8_policy.policy.render import OUTPUT_FORMATS
from fp8_policy.service.analysis import actions, routes
from fp8_policy.service.analysis import summary as summary_module
from tests.conftest import wait_for_run
from tests.service.analysis.test_analysis_api import upload_scenario, wait_for_summary
from tests.support.archives import tree_tar_gz

RUNS = "/api/v1/runs"
ESM2_LOGS = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "bionemo" / "dummy_logs_esm2"


@pytest.fixture
def recommend_calls(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every `recommend()` made (the ingest's own count too: tests clear it once the run is ready), counted once the
    app's start-up catch-up of earlier tests' runs (the database is shared per backend) is done."""
    assert client.app.state.summaries.wait_idle()
    calls: list[int] = []
    for module in (actions, summary_module):
        real = module.recommend

        def counting(data, analysis, options, history=None, real=real):
            calls.append(1)
            return real(data, analysis, options, history)

        monkeypatch.setattr(module, "recommend", counting)
    return calls


def _fresh(client: TestClient, run_id: int) -> tuple[bytes, dict[str, tuple[str, str, str]]]:
    """The JSON answer and each rendering, computed now from the stored run (what a request without the store
    would answer)."""
    with session_scope(client.app.state.session_factory) as session:
        rec = actions.recommendation_for(session, run_id, {})
    rendered = {}
    for fmt in OUTPUT_FORMATS:
        policy = actions.render_recommendation(rec, fmt)
        rendered[fmt] = (policy.content, policy.media_type, policy.filename)
    return routes._json_body(run_id, rec), rendered


def _assert_served_equals_fresh(client: TestClient, run_id: int, recommend_calls: list[int]) -> None:
    fresh_json, fresh_rendered = _fresh(client, run_id)
    recommend_calls.clear()

    answer = client.get(f"{RUNS}/{run_id}/recommendation")
    assert answer.status_code == 200, answer.text
    assert answer.content == fresh_json  # byte for byte
    for fmt, (content, media_type, filename) in fresh_rendered.items():
        rendered = client.get(f"{RUNS}/{run_id}/recommendation", params={"format": fmt})
        assert rendered.status_code == 200, rendered.text
        assert rendered.text == content and rendered.headers["content-type"].startswith(media_type)
        assert filename in rendered.headers["content-disposition"]
    assert recommend_calls == []  # all of it from the store


def test_a_cold_default_request_after_ingest_computes_nothing(
    client: TestClient, tmp_path: Path, project: str, recommend_calls: list[int], db_engine: Engine
) -> None:
    run_id = upload_scenario(client, tmp_path, project, "head_only")
    assert recommend_calls == [1]  # the ingest computed it once
    recommend_calls.clear()
    with db_engine.connect() as connection:
        stored = connection.execute(select(RunSummary.recommendation).where(RunSummary.run_id == run_id)).scalar()
    assert stored is not None and set(stored["rendered"]) == set(OUTPUT_FORMATS)

    answer = client.get(f"{RUNS}/{run_id}/recommendation")
    te_yaml = client.get(f"{RUNS}/{run_id}/recommendation", params={"format": "te-yaml"})

    assert answer.status_code == te_yaml.status_code == 200
    assert "model.lm_head" in answer.json()["fp8_skip_layers"] and "model.lm_head" in te_yaml.text
    assert recommend_calls == []
    # any option is computed (the count above can see a computation)
    assert client.get(f"{RUNS}/{run_id}/recommendation", params={"gpu_arch": "hopper"}).status_code == 200
    assert len(recommend_calls) == 1


def test_the_stored_answer_is_the_computed_one_on_a_synthetic_run(
    client: TestClient, tmp_path: Path, project: str, recommend_calls: list[int]
) -> None:
    run_id = upload_scenario(client, tmp_path, project, "head_only")
    _assert_served_equals_fresh(client, run_id, recommend_calls)


def test_the_stored_answer_is_the_computed_one_on_the_esm2_logs(
    client: TestClient, project: str, recommend_calls: list[int]
) -> None:
    if not ESM2_LOGS.is_dir():
        pytest.skip(f"fixture {ESM2_LOGS} is not available")
    response = client.post(
        RUNS,
        files={"file": ("esm2.tgz", tree_tar_gz(ESM2_LOGS))},
        data={"project": project, "name": "esm2", "metadata": '{"gpu": "H100", "te_version": "2.8"}'},
    )
    assert response.status_code == 202, response.text
    body = wait_for_run(client, response.json()["id"], timeout=120)
    assert body["status"] == "ready", body["error"]
    wait_for_summary(client, body["id"])
    _assert_served_equals_fresh(client, body["id"], recommend_calls)


def test_changed_metadata_or_policy_version_is_computed_not_served(
    client: TestClient, tmp_path: Path, project: str, recommend_calls: list[int], db_engine: Engine
) -> None:
    run_id = upload_scenario(client, tmp_path, project, "head_only")
    with db_engine.begin() as connection:
        connection.execute(update(Run).where(Run.id == run_id).values(run_metadata={"gpu": "B200"}))
    fresh_json, _ = _fresh(client, run_id)
    recommend_calls.clear()

    answer = client.get(f"{RUNS}/{run_id}/recommendation")

    assert answer.content == fresh_json and len(recommend_calls) == 1
    with db_engine.begin() as connection:
        connection.execute(update(Run).where(Run.id == run_id).values(run_metadata={"gpu": "H100"}))
        connection.execute(update(RunSummary).where(RunSummary.run_id == run_id).values(policy_version="1999.1.1"))
    client.app.state.recommendations = routes.SingleFlightCache()  # another API process: nothing cached

    assert client.get(f"{RUNS}/{run_id}/recommendation").status_code == 200
    assert len(recommend_calls) == 2


def test_deleting_the_run_removes_its_stored_recommendation(
    client: TestClient, tmp_path: Path, project: str, db_engine: Engine
) -> None:
    run_id = upload_scenario(client, tmp_path, project, "head_only")

    assert client.delete(f"{RUNS}/{run_id}").status_code == 204

    response = client.get(f"{RUNS}/{run_id}/recommendation")
    assert response.status_code == 404 and response.json()["error"] == "NotFound"
    with db_engine.connect() as connection:
        assert connection.execute(select(RunSummary).where(RunSummary.run_id == run_id)).first() is None


def test_a_summary_that_fails_at_ingest_leaves_the_run_ready_and_is_computed_on_request(
    client: TestClient,
    tmp_path: Path,
    project: str,
    recommend_calls: list[int],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def failing(run, data):
        raise RuntimeError("an analysis bug")

    with monkeypatch.context() as patch, caplog.at_level(logging.WARNING, logger="fp8_policy.ingest"):
        patch.setattr(summary_module, "compute", failing)
        run_id = upload_scenario(client, tmp_path, project, "head_only", summary=False)  # asserts it is ready
        deadline = time.monotonic() + 60
        while f"summary of run {run_id} not stored at ingest" not in caplog.text:  # the job tried, after ready
            assert time.monotonic() < deadline, "the ingest never tried to store the summary"
            time.sleep(0.05)
    recommend_calls.clear()

    answer = client.get(f"{RUNS}/{run_id}/recommendation")

    assert answer.status_code == 200 and "model.lm_head" in answer.json()["fp8_skip_layers"]
    assert len(recommend_calls) == 1
