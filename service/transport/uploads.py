"""The cap on uploads received at once, and the worker threads their bytes are handled in.

An upload holds a socket, a `.part` file and a database connection at its end; beyond `max_concurrent_uploads`
a new one is answered 503 `{"error": "TooManyUploads", ...}` with `Retry-After` before its body is read (and the
connection is closed, since its body stays unread). Hashing, multipart parsing and disk writes run in the gate's
own thread limiter, so uploads never queue behind readers for the shared threadpool (and the other way round).

One client may hold at most `max_per_client` of the slots (its token's name; anonymous: its address), so one
client's many uploads, or many stalled ones, leave slots for everyone else (a body that trickles is cut off by
the minimum body rate, service/transport/body.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from starlette.requests import Request

from fp8_policy.service.errors import TooManyUploads


def upload_client(request: Request, token_name: str | None) -> str:
    """Whose share an upload counts against: its token, or (anonymous) the address it comes from."""
    if token_name is not None:
        return f"token {token_name}"
    return f"address {request.client.host if request.client else '?'}"


def default_share(max_uploads: int) -> int:
    """Slots one client may hold when not configured: three quarters of them, at least one."""
    return max(1, (3 * max_uploads) // 4)


class UploadGate:
    def __init__(self, max_uploads: int, max_per_client: int | None = None) -> None:
        self.max_uploads = max_uploads
        self.max_per_client = min(max_uploads, max_per_client or default_share(max_uploads))
        self.active = 0
        self.by_client: dict[str, int] = {}
        self.limiter = anyio.CapacityLimiter(max_uploads)

    @asynccontextmanager
    async def slot(self, client: str = "") -> AsyncIterator[anyio.CapacityLimiter]:
        """Hold one upload slot for `client` (the event loop is single-threaded: the counters need no lock)."""
        if self.active >= self.max_uploads:
            raise TooManyUploads(
                f"{self.active} uploads are being received, the limit is {self.max_uploads}; retry in a few seconds"
            )
        held = self.by_client.get(client, 0)
        if held >= self.max_per_client:
            raise TooManyUploads(
                f"this client has {held} uploads being received, the limit per client is {self.max_per_client}; "
                "retry when one has finished"
            )
        self.active += 1
        self.by_client[client] = held + 1
        try:
            yield self.limiter
        finally:
            self.active -= 1
            left = self.by_client[client] - 1
            if left:
                self.by_client[client] = left
            else:
                del self.by_client[client]
