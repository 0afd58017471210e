"""The cap on uploads received at once, and the worker threads their bytes are handled in.

An upload holds a socket, a `.part` file and a database connection at its end; beyond `max_concurrent_uploads`
a new one is answered 503 `{"error": "TooManyUploads", ...}` with `Retry-After` before its body is read (and the
connection is closed, since its body stays unread). Hashing, multipart parsing and disk writes run in the gate's
own thread limiter, so uploads never queue behind readers for the shared threadpool (and the other way round).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from fp8_policy.service.errors import AppError

RETRY_AFTER_SECONDS = 5


class TooManyUploads(AppError):
    status_code = 503

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        # the body is left unread: the connection cannot carry another request
        self.headers = {"Retry-After": str(RETRY_AFTER_SECONDS), "Connection": "close"}


class UploadGate:
    def __init__(self, max_uploads: int) -> None:
        self.max_uploads = max_uploads
        self.active = 0
        self.limiter = anyio.CapacityLimiter(max_uploads)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[anyio.CapacityLimiter]:
        """Hold one upload slot (the event loop is single-threaded: the counter needs no lock)."""
        if self.active >= self.max_uploads:
            raise TooManyUploads(
                f"{self.active} uploads are being received, the limit is {self.max_uploads}; retry in a few seconds"
            )
        self.active += 1
        try:
            yield self.limiter
        finally:
            self.active -= 1
