"""The real app served by uvicorn on 127.0.0.1:<free port> in a thread, with the transport options that
`fp8-policy serve` uses (service/transport/server.py), for tests that need real sockets and a real event loop."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from fp8_policy.db.migrate import upgrade
from fp8_policy.service.app import create_app
from fp8_policy.service.settings import Settings
from fp8_policy.service.transport.server import uvicorn_config


@dataclass(frozen=True)
class Live:
    url: str
    host: str
    port: int
    app: FastAPI


def plain_config(settings: Settings) -> Callable[[int], uvicorn.Config]:
    """uvicorn's own defaults (lifespan on), not serve's transport options."""
    return lambda port: uvicorn.Config(create_app(settings), log_level="warning", lifespan="on")


@contextmanager
def serving(make_config: Callable[[int], uvicorn.Config], *, port: int = 0, name: str = "uvicorn") -> Iterator[int]:
    """`make_config(port)`'s app under uvicorn in a daemon thread on 127.0.0.1:`port` (0: a free one), started
    within 30 s and stopped on exit; yields the port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    port = sock.getsockname()[1]
    server = uvicorn.Server(make_config(port))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=name, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError("uvicorn did not start the app within 30 s")
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@contextmanager
def live_service(settings: Settings, *, descriptors: int | None = None) -> Iterator[Live]:
    app = create_app(settings)

    def config(port: int) -> uvicorn.Config:
        return uvicorn_config(app, settings, port=port, log_level="warning", descriptors=descriptors)

    with serving(config, name="live-uvicorn") as port:
        yield Live(f"http://127.0.0.1:{port}", "127.0.0.1", port, app)


@contextmanager
def sqlite_service(root: Path) -> Iterator[Live]:
    """`live_service` on a freshly migrated SQLite database and a data directory, both under `root`."""
    database = f"sqlite+pysqlite:///{root / 'app.db'}"
    upgrade(database)
    with live_service(Settings(_env_file=None, data_dir=root / "data", database_url=database)) as live:
        yield live
