"""`fp8-policy serve` stops within its bound after SIGTERM even when its shutdown would wait much longer
(service/transport/shutdown.py): an open streaming response and a lifespan shutdown stuck on a busy thread."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import uvicorn

from fp8_policy.service.transport.shutdown import GRACEFUL_SECONDS, BoundedShutdownServer

ROOT = Path(__file__).resolve().parents[3]

STUCK_SERVER = textwrap.dedent(
    """
    import asyncio, contextlib, sys, threading
    import uvicorn
    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse
    from fp8_policy.service.transport.shutdown import BoundedShutdownServer

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        threading.Event().wait(120)  # a job in hand that takes two minutes

    app = FastAPI(lifespan=lifespan)

    @app.get("/stream")
    async def stream():
        async def forever():
            while True:
                yield b"."
                await asyncio.sleep(0.1)
        return StreamingResponse(forever())

    config = uvicorn.Config(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
    BoundedShutdownServer(config, stop_seconds=float(sys.argv[2])).run()
    """
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_sigterm_ends_a_server_whose_shutdown_is_stuck_within_its_bound() -> None:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", STUCK_SERVER, str(port), "2"], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                stream = httpx.stream("GET", f"http://127.0.0.1:{port}/stream", timeout=5)
                response = stream.__enter__()
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and server.poll() is None, "the server did not start"
                time.sleep(0.1)
        next(response.iter_bytes())  # the stream is open

        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)  # the stuck shutdown alone would take 120 s
        stream.__exit__(None, None, None)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert server.returncode == 0


def test_connections_get_the_graceful_part_of_the_bound() -> None:
    config = uvicorn.Config(app=lambda scope, receive, send: None)

    BoundedShutdownServer(config, stop_seconds=4.0)

    assert config.timeout_graceful_shutdown == min(GRACEFUL_SECONDS, 2.0)
