"""Bounded lanes for the CPU-heavy work a cheap request can start: analyses with new settings, scalar parses.

A recompute with thresholds or options no one asked for before costs a full load and analysis of the run (about
6 s of CPU on a 2,722-layer run), a first read of a run's training scalars a parse of up to 32 MiB (2-4 s): twelve
such requests at once made an unrelated GET wait 60 s and /healthz 15 s on 2 cores. Images already had their lane
(service/visual/pool.py); these are the same idea for work that runs in the request's own thread:
* at most `running` computations of a lane run at once, the others admitted wait for a turn;
* at most `running + waiting` requests are admitted (computing, waiting for a turn, or waiting for the identical
  computation another request is running: service/analysis/recommendation_cache.py); beyond that a request is
  answered at once 429 `{"error": "ComputeQueueFull"}` with `Retry-After`, and holds nothing.
So a flood of distinct recomputes holds at most `running + waiting` of the request threads and `running` cores,
and every other request keeps its threads. Answers already computed (cached, or stored with the run's summary)
never enter a lane.

A lane is process-wide (the cores are the process's), configured from the settings by create_app. Both calls are
re-entrant within a thread: a computation that starts another (a recommendation with `previous_run` analyses two
runs; /compare/scalars parses up to 8) holds one admission and one turn.

Belongs here: admission, turns and their 429. What is computed, and what is cached, is the callers' business.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from fp8_policy.service.errors import ComputeQueueFull

RETRY_AFTER_SECONDS = ComputeQueueFull.retry_after_seconds


class ComputeLane:
    def __init__(self, name: str, running: int = 1, waiting: int = 2) -> None:
        self.name = name
        self.admitted = 0
        self._lock = threading.Lock()
        self._local = threading.local()
        self.configure(running, waiting)

    def configure(self, running: int, waiting: int) -> None:
        """Set the bounds (create_app, from the settings); requests already admitted keep their places."""
        with self._lock:
            self.running = max(1, running)
            self.capacity = self.running + max(0, waiting)
            self._turns = threading.BoundedSemaphore(self.running)

    @contextmanager
    def admission(self) -> Iterator[None]:
        """A place in the lane (429 ComputeQueueFull when there is none), without a turn: for a request that waits
        for a computation another request is running."""
        if getattr(self._local, "admitted", False):
            yield
            return
        with self._lock:
            if self.admitted >= self.capacity:
                raise ComputeQueueFull(
                    f"{self.admitted} {self.name} computations are running or waiting (limit {self.capacity}); "
                    f"retry in {RETRY_AFTER_SECONDS} s, or ask for what is already computed (default settings)"
                )
            self.admitted += 1
        self._local.admitted = True
        try:
            yield
        finally:
            self._local.admitted = False
            with self._lock:
                self.admitted -= 1

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Admission, then a turn to compute: at most `running` at once; the others wait in order of arrival."""
        with self.admission():
            if getattr(self._local, "turn", False):
                yield
                return
            turns = self._turns
            with turns:
                self._local.turn = True
                try:
                    yield
                finally:
                    self._local.turn = False


ANALYSIS = ComputeLane("analysis")  # analyses and recommendations computed for a request (not stored summaries)
SCALARS = ComputeLane("scalars-parse")  # first reads of a run's training scalars (each file version parsed once)
