"""An ingest job encodes its series before the transaction that stores them writes (db/series_rows.py): on SQLite
that transaction holds the database's only write lock, and an upload's INSERT of its run row waits for it. Under
`make bench`'s mixed load, encoding inside the lock held it 0.7-1.6 s per rank and pushed upload p99 past 2 s
(issue 20). Checked on both backends: the order of work is the same code on each."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, event

from fp8_policy.db import codec
from tests.conftest import wait_for_run
from tests.support.archives import multi_rank_tree, tree_tar_gz

WRITES = ("INSERT", "UPDATE", "DELETE")


class WriteWindows:
    """Per thread: whether its connection has written in the open transaction, and every series encoded while
    one had (thread name, first statement of that transaction)."""

    def __init__(self) -> None:
        self.open: dict[int, str] = {}
        self.encoded_inside: list[tuple[str, str]] = []
        self.encoded = 0
        self.lock = threading.Lock()

    def statement(self, _conn, _cursor, statement: str, *_args) -> None:
        if statement.lstrip()[:6].upper() in WRITES:
            self.open.setdefault(threading.get_ident(), statement.split("\n")[0][:60])

    def ended(self, _conn) -> None:
        self.open.pop(threading.get_ident(), None)

    def encode(self) -> None:
        with self.lock:
            self.encoded += 1
            first = self.open.get(threading.get_ident())
            if first is not None:
                self.encoded_inside.append((threading.current_thread().name, first))


@pytest.fixture
def windows(monkeypatch: pytest.MonkeyPatch) -> Iterator[WriteWindows]:
    seen = WriteWindows()
    real = codec.encode_values

    def encode_values(values):
        seen.encode()
        return real(values)

    monkeypatch.setattr(codec, "encode_values", encode_values)
    hooks = [("before_cursor_execute", seen.statement), ("commit", seen.ended), ("rollback", seen.ended)]
    for name, hook in hooks:
        event.listen(Engine, name, hook)
    yield seen
    for name, hook in hooks:
        event.remove(Engine, name, hook)


def test_no_series_is_encoded_while_its_transaction_holds_the_write_lock(
    make_client, windows: WriteWindows, project: str, tmp_path: Path
) -> None:
    client = make_client(job_poll_seconds=0.05)
    tree = multi_rank_tree(tmp_path / "logs", ranks=3, layers=3)
    response = client.post(
        "/api/v1/runs",
        params={"project": project},
        content=tree_tar_gz(tree),
        headers={"Content-Type": "application/gzip"},
    )
    assert response.status_code == 202, response.text
    run = wait_for_run(client, response.json()["id"])
    assert (run["status"], run["series_count"]) == ("ready", 9)
    assert windows.encoded >= 9  # the check saw the ingest's encoding
    assert windows.encoded_inside == []
