"""A run's summary is computed once per process at a time, and summaries stored without a recommendation (before
the column existed) get one (both backends).

* Readers that arrive between `ready` and the ingest's stored summary (GET /recommendation and GET /analysis
  without options) wait for the ingest's computation instead of computing their own (service/analysis/summary.py
  `ensure`): on 2 cores the second computation doubled both (bench/hot_paths.py's cold round).
* A summary whose recommendation is missing gets it on its first read (stored, so no later reader computes it),
  and from the start-up pass (`SummaryRefresher.catch_up`), which waits while the service is busy.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event, null, select, update
from sqlalchemy.pool import Pool

from fp8_policy.db.session import create_session_factory, session_scope
from fp8_policy.db.summaries import SummaryRepository
from fp8_policy.db.summary_models import RunSummary
from fp8_policy.policy.recommend import POLICY_VERSION
from fp8_policy.policy.synthetic import SCENARIOS, write_run
from fp8_policy.service.analysis import actions, routes
from fp8_policy.service.analysis import refresher as refresher_module
from fp8_policy.service.analysis import summary as summary_module
from tests.service.analysis.test_analysis_api import upload_scenario
from tests.support.archives import tree_tar_gz

RUNS = "/api/v1/runs"
READERS = 6


def _stored_recommendation(engine: Engine, run_id: int) -> object:
    with engine.connect() as connection:
        return connection.execute(select(RunSummary.recommendation).where(RunSummary.run_id == run_id)).scalar()


def _forget_recommendation(engine: Engine, run_id: int, value: object) -> None:
    """The summary as a service before the summary_recommendation migration left it (SQL NULL or JSON null)."""
    with engine.begin() as connection:
        connection.execute(update(RunSummary).where(RunSummary.run_id == run_id).values(recommendation=value))


def quiet(client: TestClient) -> None:
    """The database is shared by the tests of a backend: the app's start-up catch-up (service/analysis/refresher.py)
    recomputes earlier tests' runs left without a summary. Wait for it, so that the hooks below see this test's run
    only."""
    assert client.app.state.summaries.wait_idle()


def test_readers_during_the_ingest_summary_wait_for_it(
    client: TestClient, tmp_path: Path, project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    quiet(client)
    real_compute = summary_module.compute
    computed: list[int] = []
    started, release = threading.Event(), threading.Event()

    def held_compute(run, data):  # the ingest's computation, held until the readers have arrived
        computed.append(run.id)
        started.set()
        assert release.wait(60), "the test never released the summary computation"
        return real_compute(run, data)

    reads: list[int] = []
    real_stored = SummaryRepository.recommendation

    def counted_stored(repository, run_id, policy_version):  # a reader looked for the stored answer
        answer = real_stored(repository, run_id, policy_version)
        reads.append(run_id)
        return answer

    recommended: list[int] = []
    real_recommendation_for = actions.recommendation_for

    def counted_recommendation_for(session, run_id, overrides):
        recommended.append(run_id)
        return real_recommendation_for(session, run_id, overrides)

    monkeypatch.setattr(summary_module, "compute", held_compute)
    monkeypatch.setattr(SummaryRepository, "recommendation", counted_stored)
    monkeypatch.setattr(actions, "recommendation_for", counted_recommendation_for)
    write_run(SCENARIOS["head_only"].run, tmp_path / "run")
    posted = client.post(
        RUNS, files={"file": ("run.tgz", tree_tar_gz(tmp_path / "run"))}, data={"project": project, "name": "held"}
    )
    assert posted.status_code == 202, posted.text
    run_id = posted.json()["id"]
    assert started.wait(60), "the ingest did not compute the run's summary"
    assert client.get(f"{RUNS}/{run_id}").json()["status"] == "ready"  # computed after ready, as readers may come

    paths = [f"{RUNS}/{run_id}/recommendation", f"{RUNS}/{run_id}/analysis"] * (READERS // 2)
    with ThreadPoolExecutor(READERS) as pool:
        answers = [pool.submit(client.get, path) for path in paths]
        deadline = time.monotonic() + 30
        while not reads and time.monotonic() < deadline:  # a recommendation reader found nothing stored
            time.sleep(0.01)
        time.sleep(0.5)  # the readers (analysis ones too) reach the summary; before the fix they computed here
        release.set()
        responses = [answer.result(timeout=120) for answer in answers]

    assert [r.status_code for r in responses] == [200] * READERS
    assert computed == [run_id] and recommended == []  # the ingest's computation, and nobody else's
    assert len({r.text for r in responses[0::2]}) == 1 and len({r.text for r in responses[1::2]}) == 1
    assert "model.lm_head" in responses[0].json()["fp8_skip_layers"]


@pytest.mark.parametrize("missing", [null(), None], ids=["sql-null", "json-null"])
def test_a_summary_without_a_recommendation_gets_it_on_first_read(
    client: TestClient, tmp_path: Path, project: str, db_engine: Engine, monkeypatch: pytest.MonkeyPatch, missing
) -> None:
    run_id = upload_scenario(client, tmp_path, project, "head_only")
    computed_json = client.get(f"{RUNS}/{run_id}/recommendation").content
    _forget_recommendation(db_engine, run_id, missing)
    assert _stored_recommendation(db_engine, run_id) is None
    client.app.state.recommendations = routes.SingleFlightCache()  # a restarted process: nothing cached

    first = client.get(f"{RUNS}/{run_id}/recommendation")

    assert first.status_code == 200 and first.content == computed_json
    stored = _stored_recommendation(db_engine, run_id)
    assert isinstance(stored, dict) and stored["json"] == first.json()
    # stored: the next process's reader computes nothing
    client.app.state.recommendations = routes.SingleFlightCache()
    monkeypatch.setattr(summary_module, "compute", lambda *_: pytest.fail("computed again"))
    monkeypatch.setattr(actions, "recommendation_for", lambda *_: pytest.fail("computed again"))
    again = client.get(f"{RUNS}/{run_id}/recommendation", params={"format": "te-yaml"})
    assert again.status_code == 200 and "model.lm_head" in again.text


def test_the_start_up_pass_backfills_missing_recommendations_once_the_service_is_idle(
    client: TestClient, tmp_path: Path, project: str, db_engine: Engine
) -> None:
    old = upload_scenario(client, tmp_path / "old", project, "head_only")
    other = upload_scenario(client, tmp_path / "other", project, "head_only")
    _forget_recommendation(db_engine, old, null())
    with session_scope(create_session_factory(db_engine)) as session:
        assert old in SummaryRepository(session).without_recommendation(POLICY_VERSION)
        assert other not in SummaryRepository(session).without_recommendation(POLICY_VERSION)
    with db_engine.begin() as connection:  # the other run's summary is missing: the runs list asks for it
        connection.execute(RunSummary.__table__.delete().where(RunSummary.run_id == other))

    busy = threading.Event()
    busy.set()
    refresher = refresher_module.SummaryRefresher(create_session_factory(db_engine), busy=busy.is_set)
    try:
        refresher.catch_up()  # at start-up, while uploads are being received
        refresher.request([other])
        deadline = time.monotonic() + 60
        while _stored_recommendation(db_engine, other) is None:  # a requested run does not wait for the backfill
            assert time.monotonic() < deadline, "the requested summary was not computed"
            time.sleep(0.05)
        time.sleep(2 * refresher_module.BACKFILL_PAUSE_SECONDS)
        assert _stored_recommendation(db_engine, old) is None  # the backfill waits while the service is busy

        busy.clear()
        assert refresher.wait_idle(60)
    finally:
        refresher.stop()
    stored = _stored_recommendation(db_engine, old)
    assert isinstance(stored, dict) and "model.lm_head" in stored["json"]["fp8_skip_layers"]
    with session_scope(create_session_factory(db_engine)) as session:
        assert old not in SummaryRepository(session).without_recommendation(POLICY_VERSION)


def test_the_summary_is_computed_with_no_database_connection_held(
    client: TestClient, tmp_path: Path, project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The analysis and recommendation of a run's summary take seconds of CPU on a busy machine; computed inside the
    transaction that read the run, they held a pooled connection (and, on PostgreSQL, a snapshot) all along."""
    quiet(client)
    # connection record -> the thread that checked it out; only checkouts seen by the hook count, so a connection
    # some thread took before the hook was installed and returns after it is not a negative count
    held: dict[int, int] = {}
    during: list[int] = []

    def checkout(_dbapi, record, _proxy) -> None:
        held[id(record)] = threading.get_ident()

    def checkin(_dbapi, record) -> None:
        held.pop(id(record), None)

    real_analyze = summary_module.analyze

    def counted_analyze(data, thresholds):
        during.append(sum(1 for thread in held.values() if thread == threading.get_ident()))
        return real_analyze(data, thresholds)

    monkeypatch.setattr(summary_module, "analyze", counted_analyze)
    hooks = [("checkout", checkout), ("checkin", checkin)]
    for name, hook in hooks:
        event.listen(Pool, name, hook)
    try:
        upload_scenario(client, tmp_path, project, "head_only")  # ready, with its summary stored
    finally:
        for name, hook in hooks:
            event.remove(Pool, name, hook)
    assert during and set(during) == {0}
