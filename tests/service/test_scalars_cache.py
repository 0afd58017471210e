"""A ready run's training scalars are parsed once per process (service/live/story.py `_FinishedScalars`)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from fp8_policy.db.models import Run, RunStatus
from fp8_policy.service.live import story

LINES = b"".join(b'{"step": %d, "loss": %d.5}\n' % (step, 10 - step) for step in range(5))


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []

    def scalars_bytes(store: Any, data_dir: Path, run: Run) -> bytes:
        calls.append(run.id)
        return LINES

    monkeypatch.setattr(story, "_scalars_bytes", scalars_bytes)
    monkeypatch.setattr(story, "_finished", story._FinishedScalars())
    return calls


def _run(run_id: int, status: RunStatus, created: int = 0, sha: str = "a" * 64) -> Run:
    return Run(id=run_id, status=status, created_at=datetime(2026, 11, 26, 20, created, tzinfo=UTC), sha256=sha)


def test_a_ready_run_is_parsed_once(reads: list[int]) -> None:
    run = _run(7, RunStatus.ready)
    first = story.scalar_series(None, Path("."), run, 100)
    second = story.scalar_series(None, Path("."), run, 100)
    assert first["series"]["loss"] == {"steps": [0, 1, 2, 3, 4], "values": [10.5, 9.5, 8.5, 7.5, 6.5]}
    assert second == first
    assert reads == [7]


def test_a_later_run_with_a_deleted_runs_id_is_read_anew(reads: list[int]) -> None:
    story.scalar_series(None, Path("."), _run(7, RunStatus.ready), 100)
    story.scalar_series(None, Path("."), _run(7, RunStatus.ready, created=5, sha="b" * 64), 100)
    assert reads == [7, 7]


@pytest.mark.parametrize("status", [RunStatus.live, RunStatus.processing, RunStatus.failed])
def test_scalars_that_may_still_change_are_read_every_time(reads: list[int], status: RunStatus) -> None:
    run = _run(3, status)
    story.scalar_series(None, Path("."), run, 100)
    story.scalar_series(None, Path("."), run, 100)
    assert reads == [3, 3]


def test_the_cache_keeps_at_most_max_points(monkeypatch: pytest.MonkeyPatch, reads: list[int]) -> None:
    monkeypatch.setattr(story._FinishedScalars, "MAX_POINTS", 12)  # two runs of 5 points fit, a third evicts the first
    for run_id in (1, 2, 3):
        story.scalar_series(None, Path("."), _run(run_id, RunStatus.ready), 100)
    story.scalar_series(None, Path("."), _run(3, RunStatus.ready), 100)
    story.scalar_series(None, Path("."), _run(1, RunStatus.ready), 100)
    assert reads == [1, 2, 3, 1]
