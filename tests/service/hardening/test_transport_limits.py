"""Issue 9 item 8: no client can hold the service's connections, uploads or descriptors for ever.

The real `fp8-policy serve` (a child process, so its descriptors can be counted) on a loopback port with small
limits: a 1 s request-head timeout, a 1.5 s body-read timeout, 2 uploads at once, 30 connections. Every client
here is a raw socket doing what a careless or hostile one does: announce 1 MB and send 1 KB, trickle header
lines (slowloris), connect and say nothing, open more connections than allowed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from bench.service import SERVE, running_service, wait_healthy, wait_idle
from fp8_policy.service.transport.server import guarded_protocol
from tests.support.archives import multi_rank_tree, tree_tar_gz

HEADER_TIMEOUT, BODY_TIMEOUT, MAX_UPLOADS, CONNECTIONS = 1.0, 1.5, 2, 30
BOUNDARY = "fp8boundary"


@dataclass(frozen=True)
class Served:
    port: int
    process: subprocess.Popen
    uploads: Path  # where `.part` files live

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextmanager
def serve_process(data: Path, *options: str, **env: str) -> Iterator[Served]:
    """`fp8-policy serve` with `options` as a child process on a free loopback port, data in `data`, none of this
    environment's FP8_POLICY_* settings but `env`; stopped when the block ends."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FP8_POLICY_")}
    with running_service(data, command=[*SERVE, *options], env={**clean, **env}, timeout=60) as (server, url):
        yield Served(int(url.rsplit(":", 1)[1]), server, data / "uploads")


@pytest.fixture(scope="module", params=["httptools", "h11"])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The service on either HTTP parser it ships (service/transport/protocol.py): both carry the guards."""
    options = ["--header-timeout", str(HEADER_TIMEOUT), "--body-timeout", str(BODY_TIMEOUT)]
    options += ["--max-uploads", str(MAX_UPLOADS), "--limit-concurrency", str(CONNECTIONS)]
    data = tmp_path_factory.mktemp("transport") / "data"
    with serve_process(data, *options, FP8_POLICY_HTTP_PARSER=request.param) as served:
        # A serving process warms up once it serves (kernels, scikit-learn, gc.freeze: service/app.py), seconds of
        # GIL-heavy work during which its event loop accepts late: the descriptor counts here would be off.
        wait_idle(served.pid)
        yield served


def _connect(served: Served) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", served.port), timeout=10)
    sock.settimeout(10)
    return sock


def upload_head(declared: int) -> tuple[bytes, bytes]:
    """The request head of a multipart POST /api/v1/runs announcing `declared` body bytes, and the body's first
    part header (a file field named run.log)."""
    head = (
        f"POST /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; "
        f"boundary={BOUNDARY}\r\nContent-Length: {declared}\r\n\r\n"
    ).encode()
    preamble = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="run.log"\r\n'
        "Content-Type: text/plain\r\n\r\n"
    ).encode()
    return head, preamble


def _stalled_upload(served: Served, declared: int = 1_000_000, sent: int = 1024) -> socket.socket:
    """A multipart upload that announces `declared` bytes, sends `sent` of them and goes quiet."""
    head, preamble = upload_head(declared)
    sock = _connect(served)
    sock.sendall(head + preamble + b"x" * (sent - len(preamble)))
    return sock


def _read_until_closed(sock: socket.socket, limit: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection; raises socket.timeout past `limit`."""
    start = time.monotonic()
    sock.settimeout(limit)
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks), time.monotonic() - start


def _status_and_body(raw: bytes) -> tuple[int, dict[str, str], dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, json.loads(body) if body else {}


def _parts(served: Served) -> list[Path]:
    return sorted(served.uploads.glob("*.part")) if served.uploads.exists() else []


def _wait_no_parts(served: Served, timeout: float = 5.0) -> list[Path]:
    deadline = time.monotonic() + timeout
    while _parts(served) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _parts(served)


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.parametrize(("chosen", "expected"), [("", "GuardedHttpToolsProtocol"), ("h11", "GuardedH11Protocol")])
def test_the_server_uses_httptools_unless_h11_is_asked_for(
    monkeypatch: pytest.MonkeyPatch, chosen: str, expected: str
) -> None:
    monkeypatch.setenv("FP8_POLICY_HTTP_PARSER", chosen)
    protocol = guarded_protocol(2.5, 7)
    assert [base.__name__ for base in protocol.__mro__][1] == expected
    assert (protocol.header_timeout, protocol.max_connections) == (2.5, 7)


def test_an_upload_that_stops_sending_is_dropped_and_its_part_removed(served: Served) -> None:
    sock = _stalled_upload(served)
    try:
        time.sleep(0.3)
        assert _parts(served), "the upload should be receiving into a .part file"
        raw, waited = _read_until_closed(sock, limit=BODY_TIMEOUT + 5)
    finally:
        sock.close()
    status, headers, body = _status_and_body(raw)
    assert status == 408 and body["error"] == "RequestTimeout", raw[:300]
    assert headers.get("connection") == "close"
    assert waited < BODY_TIMEOUT + 2
    assert _wait_no_parts(served) == []


def test_a_slowloris_head_is_cut_off_after_the_header_timeout(served: Served) -> None:
    sock = _connect(served)
    start = time.monotonic()
    closed_after = None
    try:
        sock.sendall(b"GET /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        for k in range(50):  # a header line every 0.1 s for up to 5 s
            time.sleep(0.1)
            try:
                sock.sendall(f"X-Slow-{k}: {k}\r\n".encode())
            except (BrokenPipeError, ConnectionResetError):
                closed_after = time.monotonic() - start
                break
        raw, _ = _read_until_closed(sock, limit=5) if closed_after is None else (b"", 0.0)
        closed_after = closed_after or time.monotonic() - start
    finally:
        sock.close()
    assert closed_after < HEADER_TIMEOUT + 2, f"held for {closed_after:.1f} s"
    if raw:
        assert _status_and_body(raw)[0] == 408


def test_a_connection_that_never_speaks_is_closed(served: Served) -> None:
    sock = _connect(served)
    try:
        raw, waited = _read_until_closed(sock, limit=HEADER_TIMEOUT + 5)
    finally:
        sock.close()
    assert raw == b"" and waited < HEADER_TIMEOUT + 2


def test_uploads_beyond_the_cap_get_503_with_retry_after(served: Served, tmp_path: Path) -> None:
    stalled = [_stalled_upload(served) for _ in range(MAX_UPLOADS)]
    try:
        time.sleep(0.3)
        archive = tree_tar_gz(multi_rank_tree(tmp_path / "run", ranks=1))
        refused = httpx.post(f"{served.url}/api/v1/runs", files={"file": ("run.tgz", archive)}, timeout=10)
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"] == "TooManyUploads" and set(refused.json()) == {"error", "detail"}
        assert int(refused.headers["retry-after"]) > 0
    finally:
        for sock in stalled:
            sock.close()
    deadline = time.monotonic() + BODY_TIMEOUT + 5
    while True:  # the slots come back once the stalled uploads are gone
        accepted = httpx.post(f"{served.url}/api/v1/runs", files={"file": ("run.tgz", archive)}, timeout=10)
        if accepted.status_code != 503 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert accepted.status_code in (200, 202), accepted.text
    assert _wait_no_parts(served) == []


def test_idle_connections_never_exhaust_descriptors(served: Served) -> None:
    before = _open_fds(served.pid)
    sockets = []
    try:
        for _ in range(CONNECTIONS * 3):
            sockets.append(socket.create_connection(("127.0.0.1", served.port), timeout=10))
        time.sleep(0.5)
        held = _open_fds(served.pid)
        assert held <= before + CONNECTIONS + 5, f"{held - before} descriptors for {len(sockets)} idle connections"
    finally:
        for sock in sockets:
            sock.close()
    try:
        wait_healthy(served.url, served.process, HEADER_TIMEOUT + 5)
    except SystemExit as exc:  # bench.service's "exited" / "not healthy in time"
        pytest.fail(f"once the idle connections were gone: {exc}")


def test_the_connection_limit_leaves_room_for_the_pool_uploads_and_the_process(tmp_path: Path) -> None:
    from fp8_policy.service.settings import Settings
    from fp8_policy.service.transport.server import RESERVED_DESCRIPTORS, connection_limit

    settings = Settings(_env_file=None, data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'x.db'}")
    pool = settings.pool_options()
    background = settings.background_pool_options()
    assert (pool["pool_size"], pool["max_overflow"]) == (40, 10)
    assert (background["pool_size"], background["max_overflow"]) == (settings.ingest_workers + 4, 2)
    assert connection_limit(settings, 65536) == 1024  # the default when descriptors are plenty
    budget = 1024 - RESERVED_DESCRIPTORS - 50 - (settings.ingest_workers + 6) - settings.max_concurrent_uploads
    assert connection_limit(settings, 1024) == budget  # `ulimit -n` 1024: connections + pool + uploads fit
    assert connection_limit(settings.model_copy(update={"limit_concurrency": 100}), 1024) == 100
    postgres = settings.model_copy(update={"database_url": "postgresql+psycopg://u@h/db", "db_pool_size": 4})
    assert postgres.pool_options() == {"pool_size": 4, "max_overflow": 10, "pool_timeout": 30.0}
