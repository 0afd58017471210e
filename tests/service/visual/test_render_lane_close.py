"""A stopping service starts no render worker, and shuts down the one its warm-up is starting.

`fp8-policy serve` starts the light lane's worker in a background thread a second after it serves (app.py
`_warm_up`). A SIGTERM before that closed the renderer while it had no worker; the warm-up then started one
anyway, and the process ended (uvicorn re-raises SIGTERM: no atexit hook runs) with the pool's queues alive:
multiprocessing's resource tracker printed "There appear to be 5 leaked semaphore objects to clean up at
shutdown" on every such stop (make bench's restarts printed it six times).
"""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from bench.service import stop_service, wait_healthy
from fp8_policy.service import errors
from fp8_policy.service.settings import Settings
from fp8_policy.service.transport.shutdown import BoundedShutdownServer
from fp8_policy.service.visual import pool
from tests.support.archives import esm2_tar_gz
from tests.support.service_processes import serve_logged, started_by, wait_gone


def test_a_closed_renderer_starts_no_worker_and_refuses_images() -> None:
    renderer = pool.Renderer(Settings(_env_file=None, render_processes=True))
    renderer.close()

    renderer.light.warm()  # the warm-up thread coming to it after the service began to stop

    assert renderer.light._executor is None
    with pytest.raises(errors.RendererUnavailable, match="stopping"):
        renderer.light.submit(object())  # type: ignore[arg-type]
    assert renderer.light.admitted == 0  # the refused image holds no place in the lane


def test_after_the_stop_signal_the_warm_up_starts_no_worker() -> None:
    renderer = pool.Renderer(Settings(_env_file=None, render_processes=True))
    renderer.stop_starting()  # what `fp8-policy serve`'s SIGTERM handler calls (service/cli.py)

    renderer.light.warm()

    assert renderer.light._executor is None and renderer.heavy._executor is None
    renderer.close()


def test_the_bounded_server_tells_its_callback_at_the_first_signal_only() -> None:
    calls: list[int] = []
    config = uvicorn.Config(lambda scope, receive, send: None, log_level="warning")
    server = BoundedShutdownServer(config, stop_seconds=60, on_signal=lambda: calls.append(1))
    try:
        server.handle_exit(signal.SIGTERM, None)
        server.handle_exit(signal.SIGTERM, None)
        assert calls == [1] and server.should_exit
    finally:
        assert server._deadline is not None
        server._deadline.cancel()


class _SlowStartingPool:
    """Stands in for ProcessPoolExecutor: its first submit takes as long as a forkserver preloading matplotlib."""

    instances: list[_SlowStartingPool] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.submitted = threading.Event()
        self.release = threading.Event()
        self.shutdowns: list[bool] = []
        _SlowStartingPool.instances.append(self)

    def submit(self, fn: Any, *args: Any) -> Future[Any]:
        self.submitted.set()
        assert self.release.wait(30)
        future: Future[Any] = Future()
        future.set_result(fn(*args))
        return future

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        self.shutdowns.append(wait)


def test_closing_while_the_warm_up_starts_the_worker_shuts_that_worker_down(monkeypatch) -> None:
    monkeypatch.setattr(pool, "ProcessPoolExecutor", _SlowStartingPool)
    monkeypatch.setattr(_SlowStartingPool, "instances", [])
    lane = pool.Renderer(Settings(_env_file=None, render_processes=True)).light
    warming = threading.Thread(target=lane.warm, daemon=True)
    warming.start()
    (starting,) = _wait_for(lambda: _SlowStartingPool.instances)
    assert starting.submitted.wait(10)

    closing = threading.Thread(target=lane.close, daemon=True)
    closing.start()
    time.sleep(0.2)
    assert closing.is_alive(), "close() returned while the worker was still being started"

    starting.release.set()
    closing.join(10)
    warming.join(10)
    assert not closing.is_alive() and not warming.is_alive()
    assert starting.shutdowns == [True]  # the worker the warm-up started is shut down, waited for
    assert lane._executor is None
    lane.warm()
    assert len(_SlowStartingPool.instances) == 1  # and no other is started


def _wait_for(found: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := found()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
    return value


def test_sigterm_soon_after_an_upload_leaves_no_leaked_semaphores(tmp_path: Path) -> None:
    """As make bench's restarts: serve, upload the ESM-2 fixture, SIGTERM before the warm-up has started the
    render worker (it starts none after the signal) while the ingest makes the stop outlast that moment."""
    server, url, env = serve_logged(tmp_path)
    try:
        wait_healthy(url, server, timeout=120)
        with httpx.Client(base_url=url, timeout=60) as client:
            answer = client.post("/api/v1/runs", files={"file": ("esm2.tar.gz", esm2_tar_gz(), "application/gzip")})
            assert answer.status_code == 202, answer.text
        # while the ingest runs (its stop outlasts the warm-up's start, a second after serving)
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    finally:
        stop_service(server, timeout=30)
    # the resource tracker (a child of the service) prints its warning once the service has ended: read the log
    # when every process the service started has ended too
    assert not wait_gone(started_by(env["FP8_POLICY_DATA_DIR"]), 30), "processes of the service still run"
    log = (tmp_path / "serve.err").read_text()
    assert "leaked semaphore" not in log, log[-3000:]
    assert "still stopping" not in log, log[-3000:]  # stopped within its bound, not by os._exit
