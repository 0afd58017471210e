"""`SummaryRefresher`: the one background thread that (re)computes the stored summaries of ready runs
(service/analysis/summary.py computes them).

Apart from summary.py because the app starts it in its lifespan, on `fp8-policy serve`'s start-up path, while
computing a summary imports the analysis and the recommendation rules: summary.py is imported by the thread's first
summary (issue 21, tests/service/app/test_start_up_imports.py).
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session, sessionmaker

from fp8_policy._lazy import lazy_module
from fp8_policy.db.session import session_scope
from fp8_policy.db.summaries import SummaryRepository
from fp8_policy.policy.policy_version import POLICY_VERSION

if TYPE_CHECKING:
    from fp8_policy.service.analysis import summary
else:  # imported on first use: start-up path, tests/service/app/test_start_up_imports.py
    summary = lazy_module("fp8_policy.service.analysis.summary")

log = logging.getLogger("fp8_policy.summary")
STOP, REQUESTED, BACKFILL = -1, 0, 1  # SummaryRefresher's priorities
BACKFILL_PAUSE_SECONDS = 1.0  # how often a waiting backfill looks whether the service is still busy


class SummaryRefresher:
    """One background thread that (re)computes summaries of ready runs, each run at most once at a time.

    `request(ids)` is what the runs list calls for rows without a fresh summary: it returns at once.
    `catch_up()` queues every stale ready run (at start-up, after a policy-version change), and every run whose
    summary has no stored recommendation yet (stored before the column existed) as a backfill: a backfill waits
    while `busy()` says the service is busy (an ingest job running here, an upload being received), and lets
    requested runs go first. A run is computed once per process at a time (`ensure`).
    """

    def __init__(
        self, factory: sessionmaker[Session], max_pending: int = 10_000, busy: Callable[[], bool] | None = None
    ) -> None:
        self.factory = factory
        self.busy = busy or (lambda: False)
        self._queue: queue.PriorityQueue[tuple[int, int, int]] = queue.PriorityQueue(max_pending)
        self._order = itertools.count()
        self._pending: dict[int, int] = {}  # run id -> the priority it is queued with (0 requested, 1 backfill)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="summaries", daemon=True)
        self._thread.start()

    def request(self, run_ids: list[int], *, backfill: bool = False) -> None:
        priority = BACKFILL if backfill else REQUESTED
        for run_id in run_ids:
            with self._lock:
                if self._pending.get(run_id, priority + 1) <= priority:
                    continue  # queued already, as early or earlier
                self._pending[run_id] = priority
            try:
                self._queue.put_nowait((priority, next(self._order), run_id))
            except queue.Full:  # the backlog is already long: this run is picked up on a later request
                with self._lock:
                    self._pending.pop(run_id, None)

    def catch_up(self) -> None:
        with session_scope(self.factory) as session:
            repo = SummaryRepository(session)
            stale = repo.stale_ready_runs(POLICY_VERSION)
            backfill = repo.without_recommendation(POLICY_VERSION)
        self.request(stale)
        self.request(backfill, backfill=True)

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """True once nothing is pending (tests and the demo loader)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._pending:
                    return True
            time.sleep(0.02)
        return False

    def stop(self) -> None:
        self._stop.set()
        self._queue.put((STOP, 0, 0))
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while True:
            priority, order, run_id = self._queue.get()
            if priority == STOP:
                return
            with self._lock:
                if self._pending.get(run_id) != priority:
                    continue  # requested again since, with a higher priority: that entry computed it
            try:
                if priority == BACKFILL and self.busy():
                    self._queue.put_nowait((priority, order, run_id))  # later; requested runs may go first
                    if self._stop.wait(BACKFILL_PAUSE_SECONDS):
                        return
                    continue
                summary.refresh(self.factory, run_id)
            except Exception:  # a run deleted or not ready meanwhile, or a bug: logged, the list shows no summary
                log.exception("summary of run %s could not be computed", run_id)
            with self._lock:
                if self._pending.get(run_id) == priority:
                    del self._pending[run_id]
