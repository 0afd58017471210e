"""Issue 20: what an upload costs the database and the threadpool, so that it keeps its latency under read load.

An upload stores its run row, moves its file into the archive store and queues its ingest's first job in one
write transaction (on SQLite each write transaction waits for the database's one write lock, behind the ingest
jobs' writes: a second transaction for the job doubled the waiting).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import Engine, delete, event, update

from fp8_policy.db.job_models import IngestJob
from fp8_policy.db.models import Run
from tests.archives import multi_rank_tree, tree_tar_gz
from tests.service.test_ingest_jobs import jobs_of


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
