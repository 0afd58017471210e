"""How `fp8-policy serve` stops on SIGTERM / SIGINT: within `STOP_SECONDS`, whatever is in flight.

uvicorn's graceful shutdown waits for open connections (a dashboard's live stream never closes on its own) and
then for the lifespan's shutdown, which joins the ingest threads: a job parsing a large upload holds it for as
long as the job lasts. Neither is needed for correctness: an ingest job interrupted by the end of its process is
taken up again at the next start (its owner's process is gone: service/ingest/worker.py `resume_interrupted`),
an unfinished upload's `.part` file is swept at start (service/storage/disk.py), and SQLite and PostgreSQL roll back
a transaction whose connection ends. So connections get `GRACEFUL_SECONDS` (uvicorn's
`timeout_graceful_shutdown`), background threads what is left of `STOP_SECONDS`, and a process still alive at
`STOP_SECONDS` after the signal ends itself with `os._exit`.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from types import FrameType

import uvicorn

log = logging.getLogger("fp8_policy.shutdown")

STOP_SECONDS = 4.0  # from the signal to the end of the process, at most
GRACEFUL_SECONDS = 1.5  # open connections, then the lifespan's shutdown gets the rest


class BoundedShutdownServer(uvicorn.Server):
    """uvicorn's Server whose process ends at most `stop_seconds` after the first SIGTERM / SIGINT."""

    def __init__(
        self,
        config: uvicorn.Config,
        stop_seconds: float = STOP_SECONDS,
        on_signal: Callable[[], None] | None = None,
    ) -> None:
        """`on_signal`: called at the first signal, before the graceful part (in the signal handler: it must only
        set flags), so start-up work still to come can see the process is stopping."""
        if config.timeout_graceful_shutdown is None:
            # uvicorn annotates it `int | None` but passes it to asyncio.wait_for, which takes seconds as a float
            config.timeout_graceful_shutdown = min(GRACEFUL_SECONDS, stop_seconds / 2)  # type: ignore[assignment]
        super().__init__(config)
        self.stop_seconds = stop_seconds
        self.on_signal = on_signal
        self._deadline: threading.Timer | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._deadline is None:
            self._deadline = threading.Timer(self.stop_seconds, _exit_now, args=(self.stop_seconds,))
            self._deadline.daemon = True
            self._deadline.start()
            if self.on_signal is not None:
                self.on_signal()
        super().handle_exit(sig, frame)


def _exit_now(seconds: float) -> None:
    log.warning(
        "still stopping %.1f s after the signal: exiting now; interrupted ingest jobs resume at the next start", seconds
    )
    logging.shutdown()
    os._exit(0)
