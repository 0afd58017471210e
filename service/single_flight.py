"""Values computed once per key: an in-process LRU of finished values, and single-flight computing.

Concurrent requests for the same key wait for the one computing it instead of computing it again; a failure is
raised to every waiter and not cached. Used wherever a request would otherwise repeat a costly computation: the
recommendations (service/analysis/recommendation_cache.py keys them), stored summaries, the parsed training
scalars (service/scalars/actions.py), the compare page. Belongs here: the cache and the waiting, nothing that
knows what is computed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext
from typing import Generic, TypeVar

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
