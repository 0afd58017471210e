"""Issue 20: what an upload costs the database and the threadpool, so that it keeps its latency under read load.

An upload stores its run row, moves its file into the archive store and queues its ingest's first job in one
write transaction (on SQLite each write transaction waits for the database's one write lock, behind the ingest
jobs' writes: a second transaction for the job doubled the waiting). The dependencies every request goes
through that need no I/O (the app-wide request checks, the settings, the scope check) run on the event loop: a
sync dependency is one more trip through the threadpool the readers keep busy. Sync routes run in at most
`request_threads` threads at once (the rest wait their turn), so the event loop receiving an upload's body
does not wait for the GIL behind one thread per reader.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import fastapi.dependencies.utils
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, delete, event, update

from fp8_policy.db.job_models import IngestJob
from fp8_policy.db.run_models import Run
from fp8_policy.service.auth.deps import ScopeCheck
from fp8_policy.service.deps import get_app_settings
from fp8_policy.service.errors import NotFound
from fp8_policy.service.limits import check_request
from fp8_policy.service.runs import actions
from fp8_policy.service.settings import Settings
from tests.service.ingest.test_ingest_jobs import jobs_of
from tests.support.archives import multi_rank_tree, tree_tar_gz


@contextmanager
def write_transactions(*engines: Engine) -> Iterator[list[list[str]]]:
    """The INSERT/UPDATE/DELETE statements each transaction on `engines` ran (one list per transaction, in the
    order they ended; transactions that only read are left out)."""
    ended: list[list[str]] = []
    open_: dict[int, list[str]] = defaultdict(list)

    def executed(conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        verb = statement.lstrip().split(None, 1)[0].upper()
        if verb in ("INSERT", "UPDATE", "DELETE"):
            open_[id(conn.connection.dbapi_connection)].append(statement.split("(")[0].split(" SET ")[0])

    def finished(conn: Any) -> None:
        statements = open_.pop(id(conn.connection.dbapi_connection), [])
        if statements:
            ended.append(statements)

    hooks = [("after_cursor_execute", executed), ("commit", finished), ("rollback", finished)]
    for engine in engines:
        for name, hook in hooks:
            event.listen(engine, name, hook)
    try:
        yield ended
    finally:
        for engine in engines:
            for name, hook in hooks:
                event.remove(engine, name, hook)


def app_engines(client: TestClient) -> tuple[Engine, ...]:
    """The request pool's engine and the background pool's (the ingest worker's factory)."""
    state = client.app.state  # type: ignore[attr-defined]
    return state.engine, state.ingest.factory.kw["bind"]


def post(client: TestClient, data: bytes, project: str) -> dict[str, Any]:
    response = client.post(
        "/api/v1/runs", params={"project": project}, content=data, headers={"Content-Type": "application/gzip"}
    )
    assert response.status_code in (200, 202), response.text
    body: dict[str, Any] = response.json()
    return body


def transaction_of(transactions: list[list[str]], table: str) -> list[list[str]]:
    return [t for t in transactions if any(f"INTO {table}" in s.upper() for s in t)]


def test_an_upload_stores_its_run_and_queues_its_job_in_one_transaction(
    make_client: Callable[..., TestClient], db_engine: Engine, project: str, tmp_path: Path
) -> None:
    client = make_client(ingest_in_process=False)  # the job stays queued: nothing else writes meanwhile
    data = tree_tar_gz(multi_rank_tree(tmp_path / "logs", 2, layers=2))
    with write_transactions(*app_engines(client)) as transactions:
        run = post(client, data, project)
    assert run["status"] == "queued"
    assert jobs_of(db_engine, run["id"]) == [("plan", -1, "queued")]
    with_run = transaction_of(transactions, "RUNS")
    assert len(with_run) == 1 and transaction_of(transactions, "INGEST_JOBS") == with_run, transactions
    assert len(transactions) == 1, transactions  # and no other write transaction


def test_the_same_bytes_after_a_server_side_failure_are_queued_again_in_their_transaction(
    make_client: Callable[..., TestClient], db_engine: Engine, project: str, tmp_path: Path
) -> None:
    client = make_client(ingest_in_process=False)
    data = tree_tar_gz(multi_rank_tree(tmp_path / "logs", 1, layers=2))
    first = post(client, data, project)
    with db_engine.begin() as connection:  # its ingest failed for the service's reason: the bytes may succeed
        connection.execute(
            update(Run).where(Run.id == first["id"]).values(status="failed", error="InternalError: boom")
        )
        connection.execute(delete(IngestJob).where(IngestJob.run_id == first["id"]))
    with write_transactions(*app_engines(client)) as transactions:
        again = post(client, data, project)
    assert again["id"] == first["id"] and again["duplicate_of"]["id"] == first["id"]
    assert again["status"] == "queued"
    assert jobs_of(db_engine, first["id"]) == [("plan", -1, "queued")]
    assert len(transactions) == 1 and transaction_of(transactions, "INGEST_JOBS") == transactions, transactions


@pytest.mark.parametrize("path", ["/api/v1/runs?limit=5", "/api/v1/runs/1"])
def test_dependencies_without_io_do_not_go_through_the_threadpool(
    client: TestClient, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[Any] = []
    original = fastapi.dependencies.utils.run_in_threadpool

    async def recording(func: Any, *args: Any, **kwargs: Any) -> Any:
        ran.append(func)
        return await original(func, *args, **kwargs)

    monkeypatch.setattr(fastapi.dependencies.utils, "run_in_threadpool", recording)
    client.get(path)
    assert ran, "no dependency ran in the threadpool: the recording does not see them"
    on_threads = [f for f in ran if f in (check_request, get_app_settings) or isinstance(f, ScopeCheck)]
    assert on_threads == []


def test_sync_routes_run_in_at_most_request_threads_threads(
    make_client: Callable[..., TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    client = make_client(request_threads=2)
    # earlier tests' runs left without a summary (the database is shared) are recomputed at start-up, through
    # get_run too: done before the count starts
    assert client.app.state.summaries.wait_idle()
    lock = threading.Lock()
    active, most = 0, 0

    def slow_get_run(_session: Any, run_id: int) -> Any:
        nonlocal active, most
        with lock:
            active += 1
            most = max(most, active)
        time.sleep(0.3)
        with lock:
            active -= 1
        raise NotFound(f"run {run_id} does not exist")

    monkeypatch.setattr(actions, "get_run", slow_get_run)
    statuses: list[int] = []
    threads = [
        threading.Thread(target=lambda k=k: statuses.append(client.get(f"/api/v1/runs/{k + 1}").status_code))
        for k in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert statuses == [404] * 6
    assert most == 2


@pytest.mark.parametrize(("cores", "threads"), [(None, 8), (1, 8), (2, 8), (4, 16), (10, 40), (64, 40)])
def test_request_threads_default_to_four_per_core_within_8_to_40(
    cores: int | None, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: cores)
    assert Settings(_env_file=None).request_thread_count() == threads
    assert Settings(_env_file=None, request_threads=3).request_thread_count() == 3
