"""A run's training scalars are parsed once per file version and sliced per request (service/scalars/actions.py
`_ParsedScalars`): a ready run's once per process, a live run's once per size of its growing file; first reads of
one version at once wait for one parse; parses run in the scalars lane (service/lanes.py), 429 when it is full."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from fp8_policy.db.run_models import Run, RunStatus
from fp8_policy.service import lanes
from fp8_policy.service.errors import ComputeQueueFull
from fp8_policy.service.scalars import actions as story
from fp8_policy.service.single_flight import SingleFlightCache

LINES = b"".join(b'{"step": %d, "loss": %d.5}\n' % (step, 10 - step) for step in range(5))


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[int]:
    """Run ids whose scalars were read from disk; a live run's come from its received file under tmp_path."""
    calls: list[int] = []
    real = story._scalars_bytes

    def scalars_bytes(store: Any, data_dir: Path, run: Run) -> bytes | None:
        calls.append(run.id)
        return LINES if run.status == RunStatus.ready else real(store, data_dir, run)

    monkeypatch.setattr(story, "_scalars_bytes", scalars_bytes)
    monkeypatch.setattr(story, "_parsed", story._ParsedScalars())
    monkeypatch.setattr(story, "_parsing", SingleFlightCache(max_entries=0))
    return calls


def _run(run_id: int, status: RunStatus, created: int = 0, sha: str = "a" * 64) -> Run:
    return Run(id=run_id, status=status, created_at=datetime(2026, 11, 26, 20, created, tzinfo=UTC), sha256=sha)


def test_a_ready_run_is_parsed_once_and_each_limit_sliced(reads: list[int]) -> None:
    run = _run(7, RunStatus.ready)
    first = story.scalar_series(None, Path("."), run, 100)
    second = story.scalar_series(None, Path("."), run, 100)
    last_two = story.scalar_series(None, Path("."), run, 2)
    assert first["series"]["loss"] == {"steps": [0, 1, 2, 3, 4], "values": [10.5, 9.5, 8.5, 7.5, 6.5]}
    assert second == first and first["records"] == 5
    assert last_two["records"] == 2 and last_two["series"]["loss"] == {"steps": [3, 4], "values": [7.5, 6.5]}
    assert reads == [7]


def test_a_later_run_with_a_deleted_runs_id_is_read_anew(reads: list[int]) -> None:
    story.scalar_series(None, Path("."), _run(7, RunStatus.ready), 100)
    story.scalar_series(None, Path("."), _run(7, RunStatus.ready, created=5, sha="b" * 64), 100)
    assert reads == [7, 7]


def test_a_live_runs_file_is_parsed_once_per_size(reads: list[int], tmp_path: Path) -> None:
    run = _run(3, RunStatus.live)
    received = story.received_scalars(tmp_path, 3)
    assert story.scalar_series(None, tmp_path, run, 100) == {"records": 0, "series": {}}  # nothing received yet
    received.parent.mkdir(parents=True)
    received.write_bytes(LINES)
    assert story.scalar_series(None, tmp_path, run, 100)["records"] == 5
    assert story.scalar_series(None, tmp_path, run, 3)["records"] == 3
    with received.open("ab") as handle:
        handle.write(b'{"step": 5, "loss": 4.5}\n')
    grown = story.scalar_series(None, tmp_path, run, 100)
    assert grown["series"]["loss"]["steps"] == [0, 1, 2, 3, 4, 5]
    assert reads == [3, 3]  # once per size: 0 bytes had no file to read


def test_the_cache_keeps_at_most_max_points(monkeypatch: pytest.MonkeyPatch, reads: list[int]) -> None:
    monkeypatch.setattr(story._ParsedScalars, "MAX_POINTS", 12)  # two runs of 5 points fit, a third evicts the first
    for run_id in (1, 2, 3):
        story.scalar_series(None, Path("."), _run(run_id, RunStatus.ready), 100)
    story.scalar_series(None, Path("."), _run(3, RunStatus.ready), 100)
    story.scalar_series(None, Path("."), _run(1, RunStatus.ready), 100)
    assert reads == [1, 2, 3, 1]


def test_first_reads_at_once_wait_for_one_parse_and_a_full_lane_is_429(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight first reads of one version parse it once, each holding a place in the lane while it waits (1 running
    + 7 waiting = 8 places); with the lane full, a read of another run is answered 429 ComputeQueueFull at once."""
    started, release = threading.Event(), threading.Event()
    parses: list[int] = []

    def slow_bytes(store: Any, data_dir: Path, run: Run) -> bytes:
        parses.append(run.id)
        started.set()
        assert release.wait(10)
        return LINES

    monkeypatch.setattr(story, "_scalars_bytes", slow_bytes)
    monkeypatch.setattr(story, "_parsed", story._ParsedScalars())
    monkeypatch.setattr(story, "_parsing", SingleFlightCache(max_entries=0))
    lane = lanes.ComputeLane("scalars-parse", running=1, waiting=7)
    monkeypatch.setattr(lanes, "SCALARS", lane)
    answers: list[dict[str, Any]] = []
    run = _run(11, RunStatus.ready)
    readers = [
        threading.Thread(target=lambda: answers.append(story.scalar_series(None, Path("."), run, 100)))
        for _ in range(8)
    ]
    for reader in readers:
        reader.start()
    assert started.wait(10)
    deadline = time.monotonic() + 10
    while lane.admitted < 8 and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        with pytest.raises(ComputeQueueFull) as refused:
            story.scalar_series(None, Path("."), _run(12, RunStatus.ready), 100)
        assert refused.value.status_code == 429 and refused.value.headers == {"Retry-After": "5"}
    finally:
        release.set()
        for reader in readers:
            reader.join(10)
    assert parses == [11] and len(answers) == 8 and all(a["records"] == 5 for a in answers)
    assert lane.admitted == 0
