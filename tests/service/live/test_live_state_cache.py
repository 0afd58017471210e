"""service/live/actions keeps the detector table of a run between its pieces (skipping the state document's read)
only while the stored document is the one it saved: a piece whose transaction rolled back, or a document saved by
another process, makes the next piece read the stored state again, so no event is lost or raised twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from fp8_policy.db.live import LiveRepository
from fp8_policy.db.migrate import upgrade
from fp8_policy.db.session import create_db_engine, create_session_factory, session_scope
from fp8_policy.policy.live.table import SeriesTable
from fp8_policy.service.live import actions

PATH = "rank_0/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log"
NAME = "model.layers.1.mlp.fc1_gradient_underflows%"


def lines(start: int, values: list[float]) -> bytes:
    return b"".join(
        f"2026-01-15 23:06:40,060 - INFO - {NAME} \t iteration={start + k} \t value={v:.4f}\n".encode()
        for k, v in enumerate(values)
    )


@pytest.fixture
def live(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/db.sqlite"
    upgrade(url)
    factory = create_session_factory(create_db_engine(url))
    with session_scope(factory) as session:
        run_id = actions.create_live_run(session, {"name": "cache", "project": "p"}, "token").id
    sent = {"offset": 0}

    def append(data: bytes, *, fail: bool = False) -> list[str]:
        try:
            with session_scope(factory) as session:
                result = actions.append(session, tmp_path, run_id, PATH, sent["offset"], data)
                if fail:
                    raise RuntimeError("the commit fails")
        except RuntimeError:
            return []
        sent["offset"] = result.size
        return [f"{e.event.kind}:{e.event.severity}:{e.event.iteration}" for e in result.events]

    return append, factory, run_id


def test_a_rolled_back_piece_is_detected_again(live, monkeypatch) -> None:
    append, _factory, _run_id = live
    reads = []
    read = SeriesTable.from_stored
    monkeypatch.setattr(actions.SeriesTable, "from_stored", lambda *a: reads.append(1) or read(*a))
    assert append(lines(0, [0.1, 0.2])) == []
    assert append(lines(2, [0.1, 0.2])) == [] and len(reads) == 1  # the second piece used the kept table

    # three of the last five points in the warning band: the level (their median) crosses it at iteration 6
    assert append(lines(4, [0.6, 0.7, 0.6]), fail=True) == []  # saved, then rolled back: the warning is not stored
    assert append(lines(4, [0.6, 0.7, 0.6])) == ["band_crossing:warning:6"]
    assert len(reads) == 2  # read again: the stored stamp was not the rolled-back piece's


def test_a_document_saved_elsewhere_is_read_again(live) -> None:
    append, factory, run_id = live
    assert append(lines(0, [0.6] * 5)) == ["band_crossing:warning:4"]
    with session_scope(factory) as session:  # another process: the state as if nothing had been seen
        repo = LiveRepository(session)
        repo.state_for_update(run_id)
        repo.save_state(run_id, {})
    assert append(lines(5, [0.7] * 5)) == ["band_crossing:warning:9"]
