"""Recommendations computed once: an in-process LRU of finished recommendations, and single-flight computing.

A recommendation on a large run costs a full load of its series plus an analysis (0.7 s on a 2.4M-point run);
recomputing it per request made 20 concurrent readers take a minute. A recommendation depends only on
* the run as stored (database, id, uploaded bytes' sha256, ingest finish time, metadata),
* the options of the request (thresholds, GPU, TE version, ... as canonical JSON),
* the previous run's identity when `previous_run` is given (its analysis is the history),
* `POLICY_VERSION` (the rules),
so that tuple is the key (as the stored analyses are keyed by run and policy version, service/analysis/summary.py,
and rendered images by run identity, service/visual/pool.py). Concurrent requests for the same key wait for the one
computing it instead of computing it again; a failure (404, 409, 400) is raised to every waiter and not cached.

Belongs here: the cache and the waiting. Computing the recommendation is actions.recommendation_for's.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Generic, TypeVar

from sqlalchemy.orm import Session

from fp8_policy.db.runs import RunRepository
from fp8_policy.policy.policy_version import POLICY_VERSION
from fp8_policy.service.limits import run_id_of
from fp8_policy.service.runs.actions import get_ready_run

T = TypeVar("T")
DEFAULT_ENTRIES = 256


class SingleFlightCache(Generic[T]):
    """`get(key, compute)`: a cached value, the value another thread is computing for `key`, or `compute()`."""

    def __init__(self, max_entries: int = DEFAULT_ENTRIES) -> None:
        self.max_entries = max_entries
        self.computed = 0  # how many times compute() ran (tests, bench)
        self._done: OrderedDict[Hashable, T] = OrderedDict()
        self._running: dict[Hashable, Future[T]] = {}
        self._lock = threading.Lock()

    def get(
        self, key: Hashable, compute: Callable[[], T], admit: Callable[[], AbstractContextManager[object]] | None = None
    ) -> T:
        """`admit`: entered by a request that will compute or wait for a computation (not one that finds the value
        cached): a lane's admission (service/lanes.py), so waiting for another request's computation holds a
        place in its lane too."""
        with self._lock:
            if key in self._done:
                self._done.move_to_end(key)
                return self._done[key]
        with admit() if admit is not None else nullcontext():
            return self._get(key, compute)

    def _get(self, key: Hashable, compute: Callable[[], T]) -> T:
        with self._lock:
            if key in self._done:
                self._done.move_to_end(key)
                return self._done[key]
            running = self._running.get(key)
            if running is None:
                running = self._running[key] = Future[T]()
                owner = True
            else:
                owner = False
        if not owner:
            return running.result()  # raises what the computing request raised
        try:
            value = compute()
        except BaseException as exc:
            with self._lock:
                del self._running[key]
                self.computed += 1
            running.set_exception(exc)
            raise
        with self._lock:
            del self._running[key]
            self.computed += 1
            self._done[key] = value
            while len(self._done) > self.max_entries:
                self._done.popitem(last=False)
        running.set_result(value)
        return value


def recommendation_key(session: Session, run_id: int, overrides: dict[str, Any]) -> tuple[object, ...]:
    """What a recommendation of `run_id` with `overrides` depends on (raises 404 / 409 like computing it would)."""
    run = get_ready_run(session, run_id)
    options = json.dumps(overrides, sort_keys=True, default=str)
    previous: tuple[object, ...] = ()
    if "previous_run" in overrides:
        previous_id = run_id_of(overrides["previous_run"])
        other = RunRepository(session).get(previous_id) if previous_id is not None else None
        # an unknown or malformed previous run is refused by the computation itself; it never gets cached
        previous = (other.id, other.sha256, str(other.finished_at), str(other.status)) if other is not None else ("?",)
    metadata = json.dumps(run.run_metadata or {}, sort_keys=True, default=str)
    return (
        str(session.get_bind().engine.url),
        run.id,
        run.sha256,
        str(run.finished_at),
        metadata,
        options,
        previous,
        POLICY_VERSION,
    )
