"""Attack replay, live runs and deletes (SQLite and PostgreSQL): what once went wrong when the live-run and delete
paths were attacked on loopback, replayed against the running app.

* A second spelling of a received file (`rank_0//...`, `./rank_0/...`) was answered 200 and truncated the
  acknowledged bytes on disk (the row was keyed by the raw string, the disk path normalised); finalize then
  answered 500 forever. Now refused (400), the bytes stay, finalize works.
* Any upload token could append to or finalize another token's live run. Now only the creating token appends; it
  or an admin token finalizes (403 `NotRunOwner` for others).
* A delete racing an ingest job deadlocked on PostgreSQL (500, `deadlock detected`); a delete racing an append, a
  finalize or a retry answered 500 (IntegrityError, StaleDataError, FileNotFoundError, a refresh of a deleted row),
  and one racing a run summary's refresh could deadlock with it on PostgreSQL.
  Now every transaction locks the run's row first: the race ends 2xx/404/409 and the run is either whole or
  entirely gone.

The races are forced, not hoped for: the racing request (or job) is held by a hook right after it read or locked
the run, the delete is started, and the hold is released; every wait is bounded.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from fp8_policy.db.job_models import IngestJob
from fp8_policy.db.jobs import JobRepository
from fp8_policy.db.live_models import LiveEventRow, LiveFile, LiveState
from fp8_policy.db.run_models import Layer, Run, RunTag, Series
from fp8_policy.db.runs import RunRepository
from fp8_policy.db.session import create_session_factory
from fp8_policy.db.summaries import SummaryRepository
from fp8_policy.db.summary_models import RunSummary
from fp8_policy.service.analysis import summary
from fp8_policy.service.app import create_app
from fp8_policy.service.errors import InvalidLivePath
from fp8_policy.service.live import actions as live_actions
from fp8_policy.service.settings import Settings
from fp8_policy.service.storage.archive import ArchiveStore
from tests.service.live.test_live_runs import create, log_tree, put, training_log
from tests.support.archives import stats_relpath, tree_tar_gz
from tests.support.authutil import bearer, make_token, private_database
from tests.support.dbutil import insert_run

LIVE = "/api/v1/live/runs"
RUNS = "/api/v1/runs"
HOLD_SECONDS = 30.0  # the most a held request or job waits for the test to release it
# The most the ingest may take to be idle after a race. Not a speed bound: alone these tests are idle within 2 s,
# but under the whole suite on PostgreSQL the worker's pool pre-ping (SELECT 1) was seen waiting 15-30 s behind a
# backend left "idle in transaction" (CI failed once at 30 s); the cause is not found yet (see the issue notes).
IDLE_SECONDS = 90.0


class Hold:
    """Wraps a function so that its first call (matching `when`) stops after returning until `release()`."""

    def __init__(self, when: Callable[..., bool] = lambda *_a, **_k: True) -> None:
        self.when = when
        self.entered = threading.Event()
        self.released = threading.Event()
        self._taken = False
        self._guard = threading.Lock()

    def wrap(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def held(*args: Any, **kwargs: Any) -> Any:
            result = function(*args, **kwargs)
            with self._guard:
                first = not self._taken and self.when(*args, **kwargs)
                self._taken = self._taken or first
            if first:
                self.entered.set()
                self.released.wait(HOLD_SECONDS)
            return result

        return held

    def release(self) -> None:
        self.released.set()


def rows_left(engine, run_id: int) -> dict[str, int]:
    tables = {
        "runs": (Run, Run.id),
        "run_tags": (RunTag, RunTag.run_id),
        "layers": (Layer, Layer.run_id),
        "series": (Series, Series.run_id),
        "ingest_jobs": (IngestJob, IngestJob.run_id),
        "live_files": (LiveFile, LiveFile.run_id),
        "live_state": (LiveState, LiveState.run_id),
        "live_events": (LiveEventRow, LiveEventRow.run_id),
    }
    with Session(engine) as session:
        counts = {
            name: session.scalar(select(func.count()).select_from(model).where(column == run_id))
            for name, (model, column) in tables.items()
        }
    return {name: count for name, count in counts.items() if count}


def race_delete(client: TestClient, hold: Hold, racing: Callable[[], Any], run_id: int) -> tuple[int, int]:
    """Start `racing`, wait until the hold stops it, delete the run, give the delete a moment to get ahead (it must
    not, or must not break anything), release; returns (racing status, delete status)."""
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(racing)
        assert hold.entered.wait(HOLD_SECONDS), "the racing request never reached the hold"
        deleting = pool.submit(client.delete, f"{RUNS}/{run_id}")
        wait([deleting], timeout=1.0)
        hold.release()
        return first.result(HOLD_SECONDS * 2).status_code, deleting.result(HOLD_SECONDS * 2).status_code


def assert_gone(client: TestClient, db_engine, data_dir: Path, run_id: int) -> None:
    client.app.state.ingest.wait_idle(timeout=IDLE_SECONDS)
    assert client.get(f"{RUNS}/{run_id}").status_code == 404
    assert rows_left(db_engine, run_id) == {}
    assert not (data_dir / "live" / str(run_id)).exists() and not (data_dir / "runs" / str(run_id)).exists()


# --- one canonical path per live file ------------------------------------------------------------------------------
def test_another_spelling_of_a_received_file_is_refused_and_its_bytes_stay(
    client: TestClient, project: str, app_settings: Settings
) -> None:
    run = create(client, project)
    path = stats_relpath(0)
    data = training_log(0)
    assert put(client, run["id"], path, 0, data).status_code == 200

    for alias in (path.replace("/", "//", 1), f"./{path}", path.replace("/", "/./", 1), f"{path}/"):
        response = put(client, run["id"], alias, 0, data[:129])
        if response.status_code == 200:  # the HTTP client removed the dot segment: the canonical file, re-sent
            assert response.json()["size"] == len(data), alias
        else:
            assert response.status_code == 400 and response.json()["error"] == "InvalidLivePath", (alias, response.text)

    assert (app_settings.data_dir / "live" / str(run["id"]) / path).read_bytes() == data
    assert [f["path"] for f in client.get(f"{LIVE}/{run['id']}").json()["files"]] == [path]
    assert client.post(f"{LIVE}/{run['id']}/finalize").status_code == 202
    client.app.state.ingest.wait_idle(timeout=IDLE_SECONDS)
    assert client.get(f"{RUNS}/{run['id']}").json()["status"] == "ready"


@pytest.mark.parametrize(
    "alias", ["rank_0//{rest}", "./rank_0/{rest}", "rank_0/./{rest}", "rank_0/{rest}/", "rank_0/x/../{rest}"]
)
def test_every_other_spelling_is_refused_as_sent(alias: str) -> None:
    """As a raw client sends it (an HTTP client may remove dot segments before the service sees them)."""
    canonical = stats_relpath(0)
    rest = canonical.split("/", 1)[1]
    assert live_actions.file_kind(canonical) == "stats"

    with pytest.raises(InvalidLivePath):
        live_actions.file_kind(alias.format(rest=rest))


# --- live runs belong to their token -------------------------------------------------------------------------------
def test_only_the_creating_token_appends_and_it_or_an_admin_finalizes(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = private_database("sqlite", request, tmp_path)  # tokens close the whole service: a database of its own
    tokens = {name: make_token(url, scope)[1] for name, scope in (("owner", "upload"), ("other", "upload"))}
    tokens["admin"] = make_token(url, "admin")[1]
    settings = Settings(_env_file=None, data_dir=tmp_path / "data", database_url=url)
    path = stats_relpath(0)
    data = training_log(0, steps=5)

    def append(who: str, offset: int, body: bytes):
        return client.put(
            f"{LIVE}/{run_id}/files/{path}", params={"offset": offset}, content=body, headers=bearer(tokens[who])
        )

    with TestClient(create_app(settings)) as client:
        created = client.post(LIVE, json={"project": "owned"}, headers=bearer(tokens["owner"]))
        run_id = created.json()["id"]
        assert append("owner", 0, data[:100]).status_code == 200

        for who in ("other", "admin"):
            refused = append(who, 100, data[100:])
            assert refused.status_code == 403 and refused.json()["error"] == "NotRunOwner", refused.text
        refused = client.post(f"{LIVE}/{run_id}/finalize", headers=bearer(tokens["other"]))
        assert refused.status_code == 403 and refused.json()["error"] == "NotRunOwner"
        listed = client.get(f"{LIVE}/{run_id}", headers=bearer(tokens["other"])).json()
        assert listed["status"] == "live" and [f["size"] for f in listed["files"]] == [100]

        assert append("owner", 100, data[100:]).status_code == 200
        assert client.post(f"{LIVE}/{run_id}/finalize", headers=bearer(tokens["admin"])).status_code == 202
        client.app.state.ingest.wait_idle(timeout=IDLE_SECONDS)
        assert client.get(f"{RUNS}/{run_id}", headers=bearer(tokens["other"])).json()["status"] == "ready"


# --- deletes racing live requests and ingest jobs ------------------------------------------------------------------
@pytest.mark.parametrize("racing", ["append", "finalize"])
def test_a_delete_racing_an_append_or_a_finalize_never_answers_500(
    client: TestClient, project: str, app_settings: Settings, db_engine, monkeypatch: pytest.MonkeyPatch, racing: str
) -> None:
    run = create(client, project)
    path = stats_relpath(0)
    data = training_log(0)
    assert put(client, run["id"], path, 0, data[:1000]).status_code == 200
    hold = Hold()
    monkeypatch.setattr(live_actions, "_live_run", hold.wrap(live_actions._live_run))

    def race() -> Any:
        if racing == "append":
            return put(client, run["id"], path, 1000, data[1000:])
        return client.post(f"{LIVE}/{run['id']}/finalize")

    racing_status, delete_status = race_delete(client, hold, race, run["id"])

    assert racing_status in ((200 if racing == "append" else 202), 404, 409)
    assert delete_status in (204, 404)
    assert_gone(client, db_engine, app_settings.data_dir, run["id"])


@pytest.mark.parametrize(("ranks", "held_job"), [(1, "plan"), (2, "rank")])
def test_a_delete_during_ingest_waits_or_stops_the_job_and_leaves_nothing(
    client: TestClient,
    project: str,
    app_settings: Settings,
    db_engine,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    ranks: int,
    held_job: str,
) -> None:
    """The job is held inside its storing transaction, right after it marked itself done (the point where the delete
    once took the run's row while the job held its own job row: `deadlock detected` on PostgreSQL)."""
    log_tree(tmp_path / "tree", ranks=ranks)
    if held_job == "rank":  # the plan job parses both ranks while it scans unless its budget leaves one a job
        worker = client.app.state.ingest
        worker.context = replace(worker.context, settings=worker.settings.model_copy(update={"scan_parse_bytes": 1}))
    hold = Hold(when=lambda _repo, job, *_a, **_k: job.kind == held_job)
    monkeypatch.setattr(JobRepository, "complete", hold.wrap(JobRepository.complete))
    uploaded = client.post(
        RUNS,
        files={"file": ("run.tgz", tree_tar_gz(tmp_path / "tree"), "application/gzip")},
        data={"project": project},
    )
    assert uploaded.status_code == 202, uploaded.text
    run_id = uploaded.json()["id"]

    class Finished:  # the upload was answered already: the racing side is the ingest job itself
        status_code = 202

    racing_status, delete_status = race_delete(client, hold, lambda: Finished, run_id)

    assert racing_status == 202 and delete_status == 204
    assert_gone(client, db_engine, app_settings.data_dir, run_id)


def test_a_delete_racing_a_retry_never_answers_500(
    client: TestClient, project: str, app_settings: Settings, db_engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The retry is held after it read the run (checking that its upload is still stored)."""
    stored = app_settings.data_dir / "kept" / f"{project}.bin"
    stored.parent.mkdir(parents=True, exist_ok=True)
    stored.write_bytes(b"an upload whose ingest failed")
    run_id = insert_run(db_engine, project, status="failed", upload_path=f"kept/{project}.bin")
    hold = Hold()
    monkeypatch.setattr(ArchiveStore, "exists", hold.wrap(ArchiveStore.exists))

    retry_status, delete_status = race_delete(client, hold, lambda: client.post(f"{RUNS}/{run_id}/retry"), run_id)

    assert retry_status in (202, 404) and delete_status in (204, 404)
    assert_gone(client, db_engine, app_settings.data_dir, run_id)


def test_a_delete_racing_a_summary_refresh_never_deadlocks(
    client: TestClient, project: str, app_settings: Settings, db_engine, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """The refresh is held after it removed the run's previous summary, before its new one is inserted (whose
    foreign-key check then waited for the delete, which waited for the removed summary row: a deadlock)."""
    log_tree(tmp_path / "tree", ranks=1)
    uploaded = client.post(
        RUNS,
        files={"file": ("run.tgz", tree_tar_gz(tmp_path / "tree"), "application/gzip")},
        data={"project": project},
    )
    run_id = uploaded.json()["id"]
    client.app.state.ingest.wait_idle(timeout=IDLE_SECONDS)
    factory = create_session_factory(db_engine)
    summary.refresh(factory, run_id)  # the summary the next refresh replaces
    hold = Hold()
    monkeypatch.setattr(SummaryRepository, "put", hold.wrap(SummaryRepository.put))

    class Refreshed:
        status_code = 200

    def refresh() -> type[Refreshed]:
        summary.refresh(factory, run_id)
        return Refreshed

    refresh_status, delete_status = race_delete(client, hold, refresh, run_id)

    assert refresh_status == 200 and delete_status == 204
    assert_gone(client, db_engine, app_settings.data_dir, run_id)
    with Session(db_engine) as session:
        assert session.scalar(select(func.count()).select_from(RunSummary).where(RunSummary.run_id == run_id)) == 0


def test_two_live_runs_with_the_same_logs_finalized_at_once_both_answer_202(
    client: TestClient, project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first finalize is held after it found the logs' hash unclaimed in the project; the second claims it
    meanwhile (PostgreSQL; SQLite runs them one after the other), and the first's claim then failed with 500."""
    data = training_log(0, steps=5)
    runs = [create(client, project)["id"] for _ in range(2)]
    for run_id in runs:
        assert put(client, run_id, stats_relpath(0), 0, data).status_code == 200
    hold = Hold()
    monkeypatch.setattr(RunRepository, "find_by_hash", hold.wrap(RunRepository.find_by_hash))

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(client.post, f"{LIVE}/{runs[0]}/finalize")
        assert hold.entered.wait(HOLD_SECONDS), "the first finalize never reached the hold"
        second = pool.submit(client.post, f"{LIVE}/{runs[1]}/finalize")
        wait([second], timeout=1.0)
        hold.release()
        statuses = [first.result(HOLD_SECONDS * 2).status_code, second.result(HOLD_SECONDS * 2).status_code]

    assert statuses == [202, 202]
    client.app.state.ingest.wait_idle(timeout=IDLE_SECONDS)
    assert [client.get(f"{RUNS}/{run_id}").json()["status"] for run_id in runs] == ["ready", "ready"]
