"""uvicorn's HTTP/1.1 protocols (httptools, or h11 where httptools is not installed) with a request-head timeout
and a hard cap on open connections.

uvicorn has no timeout for receiving a request head: `timeout_keep_alive` only runs between requests and is
cancelled by the first byte received (`_unset_keepalive_if_required()` opens `H11Protocol.data_received`,
https://github.com/Kludex/uvicorn/blob/main/uvicorn/protocols/http/h11_impl.py), and a fresh connection has no
timer at all — so a client that trickles a header line every few seconds (slowloris) holds its connection, and
its file descriptor, for ever. ASGI middleware cannot help: the application is only called once the head is
complete. `limit_concurrency` answers 503 to requests beyond the limit, but only after their head arrived, and
connections are still accepted. Hence these subclasses:

* the head timer starts when a connection opens, and on a kept-alive connection at the first byte of the next
  head (as hyper's `header_read_timeout`, https://github.com/hyperium/hyper/pull/2675); it stops when h11 has
  parsed the complete head. When it fires the connection is closed (408 if part of a head had arrived);
* beyond `max_connections` open connections a new one is answered 503 and closed at once, so idle sockets can
  never use up the process's descriptors.

httptools (llhttp, the parser of Node.js; uvicorn's own choice when it is installed, `http="auto"`) is preferred:
receiving 400 MiB of request bodies on loopback took 0.39-0.50 s of server CPU with it and 0.57-0.96 s with h11
(same run, 8 MiB PUTs; h11 copies every body chunk into and out of its receive buffer in Python), and live
pieces and uploads are mostly body bytes. h11 stays the fallback for installs without the compiled wheel.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("fp8_policy.transport")

_TIMEOUT_408 = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b"content-length: %d\r\n\r\n%s"
)
_BUSY_503 = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 5\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
)


def _with_body(template: bytes, body: bytes) -> bytes:
    return template % (len(body), body)


class _HeadGuard(asyncio.Protocol):
    """The guard shared by both protocols (first in their MRO, so `super()` is uvicorn's protocol); the subclass says
    when a complete request head was parsed (`_disarm_head_timer`)."""

    header_timeout: float = 15.0
    max_connections: int | None = None

    _head_timer: asyncio.TimerHandle | None = None
    _head_bytes: int = 0
    # provided by uvicorn's protocol classes
    connections: set[Any]
    cycle: Any
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    client: Any

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._guard_connection(transport)

    def data_received(self, data: bytes) -> None:
        self._guard_data(data)
        super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def _guard_connection(self, transport: asyncio.Transport) -> None:
        if self.max_connections is not None and len(self.connections) > self.max_connections:
            log.warning("refusing a connection: %d open (limit %d)", len(self.connections) - 1, self.max_connections)
            body = b'{"error":"TooManyConnections","detail":"the service has too many open connections; retry later"}'
            transport.write(_with_body(_BUSY_503, body))
            transport.close()
            return
        self._arm_head_timer()

    def _guard_data(self, data: bytes) -> None:
        if self._awaiting_head():
            if self._head_timer is None:
                self._arm_head_timer()
            self._head_bytes += len(data)

    def _awaiting_head(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_bytes = 0
        self._head_timer = self.loop.call_later(self.header_timeout, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or not self._awaiting_head():
            return
        if self._head_bytes:
            log.warning("closing %s: no complete request head within %g s", self.client, self.header_timeout)
            body = (
                b'{"error":"RequestTimeout","detail":"the request head was not complete within %g s"}'
                % self.header_timeout
            )
            self.transport.write(_with_body(_TIMEOUT_408, body))
        self.transport.close()


class GuardedH11Protocol(_HeadGuard, H11Protocol):
    """`H11Protocol` plus a request-head timeout and a connection cap (class attributes, see `guarded_protocol`)."""

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:  # h11 produced a complete request head
            self._disarm_head_timer()
