"""The real app served by uvicorn on 127.0.0.1:<free port> in a thread, with the transport options that
`fp8-policy serve` uses (service/transport/server.py), for tests that need real sockets and a real event loop."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from fastapi import FastAPI

from fp8_policy.service.app import create_app
from fp8_policy.service.settings import Settings
from fp8_policy.service.transport.server import uvicorn_config


@dataclass(frozen=True)
class Live:
    url: str
    host: str
    port: int
    app: FastAPI


@contextmanager
def live_service(settings: Settings, *, descriptors: int | None = None) -> Iterator[Live]:
    import uvicorn

    app = create_app(settings)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn_config(app, settings, port=port, log_level="warning", descriptors=descriptors))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="live-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError("uvicorn did not start the app within 30 s")
        time.sleep(0.02)
    try:
        yield Live(f"http://127.0.0.1:{port}", "127.0.0.1", port, app)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
