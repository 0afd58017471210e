"""What answers while `fp8-policy serve` starts (service/transport/starting.py): 503 "starting" on the bound port,
never a claim of health, and the sockets left listening for uvicorn when it stops."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from fp8_policy.service.transport.starting import StartingResponder, listen, url


@pytest.fixture
def responder():
    sockets = listen("127.0.0.1", 0)
    responder = StartingResponder(sockets).start()
    try:
        yield responder, url(sockets)
    finally:
        responder.stop()
        for sock in sockets:
            sock.close()


def test_healthz_says_starting_with_503(responder) -> None:
    _, base = responder
    answer = httpx.get(f"{base}/healthz?verbose=1")
    assert answer.status_code == 503
    assert answer.json()["status"] == "starting"
    assert answer.headers["retry-after"] == "1"


def test_other_requests_are_refused_with_retry_after_and_a_page_for_browsers(responder) -> None:
    _, base = responder
    api = httpx.get(f"{base}/api/v1/runs")
    assert (api.status_code, api.json()["error"], api.headers["retry-after"]) == (503, "Starting", "1")
    page = httpx.get(f"{base}/", headers={"Accept": "text/html,application/xhtml+xml"})
    assert page.status_code == 503 and page.headers["content-type"].startswith("text/html")
    assert 'http-equiv="refresh"' in page.text
    head = httpx.head(f"{base}/healthz")
    assert head.status_code == 503 and head.content == b""


def test_an_upload_during_start_up_gets_the_503_not_a_reset(responder) -> None:
    _, base = responder
    answer = httpx.post(f"{base}/api/v1/runs", files={"file": ("run.log", b"x" * 300_000)})
    assert (answer.status_code, answer.json()["error"]) == (503, "Starting")


def test_a_20_mib_upload_sent_whole_gets_the_whole_503_over_a_plain_socket(responder) -> None:
    """A client that sends its whole body before reading (http.client, urllib, a plain socket) must be able to:
    the responder drains the body after the 503 instead of closing with it unread (a reset, EPIPE here)."""
    _, base = responder
    size = 20 << 20
    with socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])), timeout=30) as connection:
        head = f"POST /api/v1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n"
        connection.sendall(head.encode())
        connection.sendall(b"\0" * size)  # before the fix: BrokenPipeError once 1 MiB of it was read
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    status, _, rest = answer.partition(b"\r\n")
    headers, _, body = rest.partition(b"\r\n\r\n")
    assert status == b"HTTP/1.1 503 Service Unavailable"
    assert b"Connection: close" in headers and b"Retry-After: 1" in headers
    assert json.loads(body)["error"] == "Starting"


def test_stopped_it_leaves_the_port_listening_for_the_next_server(responder) -> None:
    started, base = responder
    started.stop()
    started.stop()  # idempotent
    port = int(base.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=2) as connection:  # queued in the backlog
        connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        connection.settimeout(0.5)
        with pytest.raises(TimeoutError):  # nobody answers any more: the next server will
            connection.recv(1)


def test_listen_binds_every_address_of_a_name_and_refuses_a_taken_port() -> None:
    sockets = listen("localhost", 0)
    try:
        assert {sock.family for sock in sockets} <= {socket.AF_INET, socket.AF_INET6} and sockets
        port = sockets[0].getsockname()[1]
        with pytest.raises(OSError):
            listen("127.0.0.1", port) if sockets[0].family == socket.AF_INET else listen("::1", port)
    finally:
        for sock in sockets:
            sock.close()


def test_a_serving_process_warms_up_once_it_serves(tmp_path, monkeypatch) -> None:
    """Loading cached kernels (0.5-0.6 s of CPU, much of it holding the GIL) no longer runs beside the end of a
    restart's start-up: `serve` sets app.state.serving when uvicorn takes the port over (service/app.py)."""
    import threading

    from fastapi.testclient import TestClient

    from fp8_policy.db.migrate import upgrade
    from fp8_policy.service import app as app_module
    from fp8_policy.service.settings import Settings

    url = f"sqlite:///{tmp_path / 'w.db'}"
    upgrade(url)
    warmed = threading.Event()
    monkeypatch.setattr(app_module, "warm_up_process", warmed.set)
    monkeypatch.setattr(app_module, "cache_complete", lambda: True)  # the wait is for loading a complete cache
    monkeypatch.setattr(app_module, "WARM_UP_GRACE_SECONDS", 0.0)
    app = app_module.create_app(Settings(_env_file=None, data_dir=tmp_path / "data", database_url=url))
    app.state.long_running = True
    with TestClient(app):
        assert not warmed.wait(0.5), "warmed up before the process served"
        app.state.serving.set()
        assert warmed.wait(30)


def test_with_the_kernel_cache_incomplete_the_warm_up_starts_once_the_process_serves(tmp_path, monkeypatch) -> None:
    """The compile then runs in a child process (GIL free) and large uploads wait for it. It starts once the
    process serves, after the grace: even asking whether numba's cache is complete imports numba (0.3 s of CPU,
    holding the GIL), which beside start-up or uvicorn's first answers delayed /healthz's 200 (issue 21)."""
    import threading

    from fastapi.testclient import TestClient

    from fp8_policy.db.migrate import upgrade
    from fp8_policy.service import app as app_module
    from fp8_policy.service.settings import Settings

    url = f"sqlite:///{tmp_path / 'w.db'}"
    upgrade(url)
    warmed, asked = threading.Event(), threading.Event()

    def incomplete() -> bool:
        asked.set()
        return False

    monkeypatch.setattr(app_module, "warm_up_process", warmed.set)
    monkeypatch.setattr(app_module, "cache_complete", incomplete)
    monkeypatch.setattr(app_module, "WARM_UP_GRACE_SECONDS", 1.5)
    app = app_module.create_app(Settings(_env_file=None, data_dir=tmp_path / "data", database_url=url))
    app.state.long_running = True
    with TestClient(app):
        assert not asked.wait(0.5), "asked numba's cache before the process served"
        assert not warmed.is_set()
        app.state.serving.set()
        # not right as uvicorn starts either: numba's import would hold the GIL over its first answers
        assert not asked.wait(0.5), "asked numba's cache within the grace after serving"
        assert warmed.wait(30)


def test_the_warm_up_leaves_numba_s_cache_complete() -> None:
    """`cache_complete()` decides whether a start compiles the kernels in a child process first (and whether a
    serving process defers loading them until it serves). A dispatcher the warm-up never called (find_newline,
    used only to drop an over-long line) left it False for ever: every start with a warm cache ran the child,
    which loaded every kernel from the cache again, and loaded them in-process too at once, beside start-up."""
    from fp8_policy.service.ingest.kernel_warmup import cache_complete, warm_parser

    warm_parser()

    assert cache_complete()


def test_a_compile_child_that_ends_without_output_is_reported_with_its_exit_status(monkeypatch, caplog) -> None:
    """A child ended by a signal (the service stopping while it compiled) printed nothing: the warning used to end
    in "failed: " and said nothing."""
    import logging
    import subprocess

    from fp8_policy.service.ingest import kernel_warmup

    monkeypatch.setattr(
        kernel_warmup.subprocess, "run", lambda args, **_: subprocess.CompletedProcess(args, -15, "", "")
    )
    with caplog.at_level(logging.WARNING, logger="fp8_policy.kernels"):
        assert kernel_warmup.compile_in_child() is False
    assert "failed (exit status -15): no output" in caplog.text


def test_garbage_collection_paused_for_the_imports_is_back_once_the_app_serves(tmp_path) -> None:
    """`serve` disables the cyclic collector while the app imports (service/cli.py); the hand-over to uvicorn
    turns it back on, or a serving process would never collect a reference cycle."""
    import gc

    from fastapi.testclient import TestClient

    from fp8_policy.db.migrate import upgrade
    from fp8_policy.service.app import create_app
    from fp8_policy.service.cli import _hand_over_when_started
    from fp8_policy.service.settings import Settings

    db_url = f"sqlite:///{tmp_path / 'gc.db'}"
    upgrade(db_url)
    app = create_app(Settings(_env_file=None, data_dir=tmp_path / "data", database_url=db_url))
    sockets = listen("127.0.0.1", 0)
    starting = StartingResponder(sockets).start()
    _hand_over_when_started(app, starting, url(sockets))
    gc.disable()
    frozen = gc.get_freeze_count()
    try:
        with TestClient(app):
            assert gc.isenabled()
            assert app.state.serving.is_set()
            # start-up's objects frozen first: the collector's first run does not walk them
            assert gc.get_freeze_count() > frozen
    finally:
        gc.unfreeze()  # this test process builds app after app: its objects must stay collectable
        gc.enable()
        starting.stop()
        for sock in sockets:
            sock.close()
