"""Run an async test scenario on a thread of its own.

`anyio.run` refuses to start where an event loop is already running, and one can be: a Playwright sync session
that an earlier browser test of the same pytest-xdist worker left open keeps its loop marked as running on the
main thread. A fresh thread has no running loop, whatever ran before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

import anyio


def run_async(scenario: Callable[[], Awaitable[None]]) -> None:
    """`anyio.run(scenario)` on a new thread; its exceptions (pytest's included) are raised here."""
    with ThreadPoolExecutor(1, thread_name_prefix="async-scenario") as pool:
        pool.submit(anyio.run, scenario).result()
