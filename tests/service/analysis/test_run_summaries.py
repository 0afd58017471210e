"""Stored run summaries: the runs list reads them (never analyses), GET /analysis serves the stored default
analysis, and a summary computed by another policy version is recomputed, not served (both backends)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, delete, select, update

from fp8_policy.db.summary_models import RunSummary
from fp8_policy.policy.recommend import POLICY_VERSION
from fp8_policy.service.analysis import summary as summary_module
from tests.service.analysis.test_analysis_api import upload_scenario

RUNS = "/api/v1/runs"


def _listed(client: TestClient, project: str) -> dict[int, dict]:
    response = client.get(RUNS, params={"project": project})
    assert response.status_code == 200, response.text
    return {item["id"]: item for item in response.json()["items"]}


def _summary_after_refresh(client: TestClient, project: str, run_id: int) -> dict:
    _listed(client, project)  # asks for the summary
    assert client.app.state.summaries.wait_idle(timeout=60)
    stored = _listed(client, project)[run_id]["summary"]
    assert stored is not None
    return stored


@pytest.fixture
def head_only(client: TestClient, tmp_path: Path, project: str) -> int:
    return upload_scenario(client, tmp_path, project, "head_only")


def _no_analysis(*_args, **_kwargs):
    raise AssertionError("analysed during a request that must read stored data")


class TestRunsListSummary:
    def test_summary_agrees_with_the_analysis_and_the_recommendation(
        self, client: TestClient, project: str, head_only: int
    ) -> None:
        stored = _summary_after_refresh(client, project, head_only)

        analysis = client.get(f"{RUNS}/{head_only}/analysis", params={"critical": 2.0}).json()  # computed afresh
        recommendation = client.get(f"{RUNS}/{head_only}/recommendation").json()
        order = ["ok", "warning", "critical", "severe"]
        worst = max((f["severity"] for f in analysis["findings"]), key=order.index, default="ok")
        assert stored["severity"] == worst != "ok"
        assert stored["pattern"] == analysis["findings"][0]["pattern"] == "head_only"
        assert stored["headline"] == analysis["findings"][0]["summary"]
        assert stored["to_bf16"] == len(recommendation["fp8_skip_layers"]) > 0
        assert stored["policy_version"] == POLICY_VERSION

    def test_the_list_request_never_analyses(
        self, client: TestClient, project: str, head_only: int, monkeypatch: pytest.MonkeyPatch, db_engine: Engine
    ) -> None:
        with db_engine.begin() as connection:  # the ingest stored it: a run whose summary is missing
            connection.execute(delete(RunSummary).where(RunSummary.run_id == head_only))
        monkeypatch.setattr(summary_module, "analyze", _no_analysis)
        monkeypatch.setattr(client.app.state.summaries, "request", lambda ids: None)  # nothing in the background

        item = _listed(client, project)[head_only]

        assert item["status"] == "ready" and item["summary"] is None

    def test_a_summary_of_another_policy_version_is_recomputed(
        self, client: TestClient, project: str, head_only: int, db_engine: Engine
    ) -> None:
        _summary_after_refresh(client, project, head_only)
        with db_engine.begin() as connection:
            connection.execute(
                update(RunSummary)
                .where(RunSummary.run_id == head_only)
                .values(policy_version="1999.1.1", severity="ok", pattern=None)
            )

        assert _listed(client, project)[head_only]["summary"] is None  # stale: not served
        fresh = _summary_after_refresh(client, project, head_only)

        assert fresh["policy_version"] == POLICY_VERSION and fresh["pattern"] == "head_only"

    def test_the_ingest_stores_the_summary(self, client: TestClient, project: str, head_only: int) -> None:
        stored = _listed(client, project)[head_only][
            "summary"
        ]  # the first list: nothing computed in the background yet

        assert stored is not None and stored["pattern"] == "head_only"

    def test_deleting_the_run_removes_its_summary(
        self, client: TestClient, project: str, head_only: int, db_engine: Engine
    ) -> None:
        _summary_after_refresh(client, project, head_only)

        assert client.delete(f"{RUNS}/{head_only}").status_code == 204

        with db_engine.connect() as connection:
            assert connection.execute(select(RunSummary).where(RunSummary.run_id == head_only)).first() is None


class TestStoredAnalysis:
    def test_default_analysis_is_served_from_the_store(
        self, client: TestClient, head_only: int, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        first = client.get(f"{RUNS}/{head_only}/analysis").json()
        monkeypatch.setattr(summary_module, "analyze", _no_analysis)

        second = client.get(f"{RUNS}/{head_only}/analysis")

        assert second.status_code == 200 and second.json() == first
        assert first["run_id"] == head_only and first["findings"][0]["pattern"] == "head_only"

    def test_thresholds_in_the_query_are_computed_not_read_from_the_store(
        self, client: TestClient, head_only: int
    ) -> None:
        default = client.get(f"{RUNS}/{head_only}/analysis").json()
        strict = client.get(f"{RUNS}/{head_only}/analysis", params={"critical": 50, "severe": 90}).json()

        assert strict["thresholds"] != default["thresholds"]

    def test_a_stale_stored_analysis_is_not_served(self, client: TestClient, head_only: int, db_engine: Engine) -> None:
        real = client.get(f"{RUNS}/{head_only}/analysis").json()
        with db_engine.begin() as connection:
            connection.execute(
                update(RunSummary)
                .where(RunSummary.run_id == head_only)
                .values(policy_version="1999.1.1", analysis={"run_id": head_only, "findings": []})
            )

        assert client.get(f"{RUNS}/{head_only}/analysis").json() == real

    def test_a_run_that_is_not_ready_keeps_its_409(self, client: TestClient, project: str, db_engine: Engine) -> None:
        from tests.support.dbutil import insert_run

        run_id = insert_run(db_engine, project, status="queued")

        response = client.get(f"{RUNS}/{run_id}/analysis")

        assert response.status_code == 409 and response.json()["error"] == "NotReady"


def test_concurrent_first_reads_of_the_analysis_all_succeed(client: TestClient, head_only: int) -> None:
    """Several requests computing the same run's first summary at once (PostgreSQL raised IntegrityError)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: client.get(f"{RUNS}/{head_only}/analysis"), range(6)))

    assert [a.status_code for a in answers] == [200] * 6
    assert len({a.text for a in answers}) == 1
