"""The request-head timeout and connection cap of service/transport/protocol.py on uvicorn's httptools protocol.

A module of its own because uvicorn's httptools protocol imports `httptools` (a compiled wheel) at import time:
`server.guarded_protocol` imports this module only when that works, and keeps h11 otherwise.
"""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from fp8_policy.service.transport.protocol import _HeadGuard


class GuardedHttpToolsProtocol(_HeadGuard, HttpToolsProtocol):
    """`HttpToolsProtocol` plus a request-head timeout and a connection cap (class attributes)."""

    def on_headers_complete(self) -> None:  # llhttp parsed a complete request head
        super().on_headers_complete()
        self._disarm_head_timer()
