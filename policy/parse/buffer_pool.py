"""Free lists of large buffers, kept for the next parse in the same process.

Belongs here: the bounded, thread-safe keeping of buffers between uses; what a buffer is and how it is sized
stays with its user (policy/parse/stats_blocks.py: block buffers; policy/parse/stats_scan.py: scratch sets, staging chunks).

Why keep them: a fresh buffer page-faults on its first touch, and a virtual machine that hands freed guest
pages back to its host (virtio-balloon free page reporting, Linux Documentation/mm/free_page_reporting.rst)
faults them in from the host again: on the 2-core dev VM, first-touching 94 MB took 0.34 s against 0.018 s
for memory the process already held, and freed memory went cold again after ~3 s idle. A parse touches a few
hundred MB of such buffers; kept here, they stay resident between jobs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class FreeList(Generic[T]):
    """At most `keep` idle items; `take(need)` hands out one whose size (`size_of`) is at least `need`."""

    def __init__(self, keep: int, size_of: Callable[[T], int]) -> None:
        self.keep = keep
        self.size_of = size_of
        self._items: list[T] = []
        self._lock = threading.Lock()

    def take(self, need: int) -> T | None:
        """The smallest idle item of at least `need`, or None."""
        with self._lock:
            fitting = [k for k, item in enumerate(self._items) if self.size_of(item) >= need]
            if not fitting:
                return None
            best = min(fitting, key=lambda k: self.size_of(self._items[k]))
            return self._items.pop(best)

    def give(self, item: T) -> None:
        """Keep `item` for a later `take`; when `keep` items are idle already, it replaces the smallest one if it
        is larger (small buffers of an odd parse must not crowd out the usual ones), else it is dropped."""
        with self._lock:
            if len(self._items) < self.keep:
                self._items.append(item)
                return
            smallest = min(range(len(self._items)), key=lambda k: self.size_of(self._items[k]))
            if self.size_of(item) > self.size_of(self._items[smallest]):
                self._items[smallest] = item

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
