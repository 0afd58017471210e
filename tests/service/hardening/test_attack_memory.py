"""Attack replay under a memory bound (SQLite and PostgreSQL): `fp8-policy serve` runs in a child process whose
address space is capped (RLIMIT_AS, set by `preexec_fn` before it starts), and takes the attacks of issue 30 that
once grew a process to 23 GB (num_layers 10**18), 1.94 GB (a 128 MiB JSON body) or 3.2 GB (16 scalar reads at
once). Under the cap an allocation in proportion to what a client sent fails at once (a MemoryError, a 500, or the
process gone) instead of swapping the machine; here every attack must be answered with its 4xx (or the lane's
429), the process must stay up, and its peak resident memory (VmHWM) must stay within the service's 1 GB target.

The cap is ADDRESS_SPACE_BYTES: the idle service maps about 1.1 GB (interpreter, numpy, numba's cached kernels,
SQLAlchemy, two malloc arenas: MALLOC_ARENA_MAX=2, as glibc's default of 8 per core only reserves address space),
so the cap leaves it about 1.4 GB to grow. Only loopback traffic, bounded in count and time.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from bench.service import free_port, stop_service, vm_hwm_mb, wait_healthy
from tests.service.scalars.test_uploaded_scalars import logs, records
from tests.support.archives import tar_bytes

ROOT = Path(__file__).resolve().parents[3]
ADDRESS_SPACE_BYTES = int(2.5 * 1024**3)
RSS_TARGET_MB = 1024
HUGE = 10**18


def _cap_address_space() -> None:  # runs in the child between fork and exec
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))


@pytest.fixture
def capped_service(migrated_url: str, tmp_path: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FP8_POLICY_")}
    env.update(
        FP8_POLICY_DATA_DIR=str(tmp_path / "data"),
        FP8_POLICY_DATABASE_URL=migrated_url,
        FP8_POLICY_COMPUTE_RUNNING="1",
        MALLOC_ARENA_MAX="2",
    )
    log = (tmp_path / "serve.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "fp8_policy.service.cli", "serve", "--no-migrate", "--no-demo"]
        + ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=_cap_address_space,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, server, timeout=120)
        yield server, url
    finally:
        stop_service(server, timeout=30)
        log.close()


def _raw(url: str, head: str, body_bytes: int, chunked: bool = False) -> bytes:
    """Send a request head and up to `body_bytes` of body (stopping when the server answers or closes); the answer."""
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode())
        piece, sent = b" " * 65536, 0
        try:
            while sent < body_bytes:
                sock.sendall(b"10000\r\n" + piece + b"\r\n" if chunked else piece)
                sent += len(piece)
                sock.setblocking(False)
                try:
                    if sock.recv(1, socket.MSG_PEEK):
                        break  # answered already
                except BlockingIOError:
                    pass
                finally:
                    sock.setblocking(True)
        except (BrokenPipeError, ConnectionResetError):
            pass
        sock.settimeout(10)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except (ConnectionResetError, TimeoutError):
            pass
        return answer


def _upload(client: httpx.Client, project: str, members: dict[str, bytes], metadata: dict | None = None) -> int:
    data = {"project": project, **({"metadata": json.dumps(metadata)} if metadata else {})}
    answer = client.post("/api/v1/runs", data=data, files={"file": ("logs.tar.gz", tar_bytes(members))})
    assert answer.status_code == 202, answer.text
    run_id = answer.json()["id"]
    deadline = time.monotonic() + 120
    while client.get(f"/api/v1/runs/{run_id}").json()["status"] != "ready":
        assert time.monotonic() < deadline, f"run {run_id} not ready"
        time.sleep(0.1)
    return run_id


def test_the_attacks_are_answered_within_the_memory_bound(
    capped_service: tuple[subprocess.Popen, str], project: str
) -> None:
    server, url = capped_service
    with httpx.Client(base_url=url, timeout=60) as client:
        bad = _upload(client, project, {**logs(), "scalars.jsonl": records(range(2000))}, {"num_layers": HUGE})
        good = _upload(client, project, {**logs(), "n.txt": b"1"})

        dims = client.post(f"/api/v1/runs/{good}/recommendation", json={"model_dims": {"num_layers": HUGE}})
        assert dims.status_code == 400 and "at most 10,000" in dims.text
        for path in (f"/api/v1/runs/{bad}/analysis", f"/api/v1/runs/{bad}/recommendation", "/api/v1/runs"):
            assert client.get(path).status_code == 200, path
        assert client.get("/api/v1/compare", params={"base": good, "head": bad}).status_code == 200

        head = (
            f"POST /api/v1/runs/{good}/recommendation HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        )
        declared = _raw(url, head + f"Content-Length: {128 * 1024**2}\r\n\r\n", 4 * 1024**2)
        chunked = _raw(url, head + "Transfer-Encoding: chunked\r\n\r\n", 64 * 1024**2, chunked=True)
        patch = _raw(
            url,
            f"PATCH /api/v1/runs/{good} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {64 * 1024**2}\r\n\r\n",
            2 * 1024**2,
        )
        for answer in (declared, chunked, patch):
            assert answer.startswith(b"HTTP/1.1 413") and b"BodyTooLarge" in answer, answer[:300]

        def recompute(k: int) -> int:
            return client.post(
                f"/api/v1/runs/{bad}/recommendation", json={"thresholds": {"critical": 2.0 + k / 100}}
            ).status_code

        def scalars(k: int) -> int:
            return client.get(f"/api/v1/live/runs/{bad}/scalars", params={"limit": 100 + k}).status_code

        with ThreadPoolExecutor(32) as pool:
            flood = [pool.submit(recompute, k) for k in range(16)] + [pool.submit(scalars, k) for k in range(16)]
            assert client.get("/api/v1/runs", params={"project": project}).status_code == 200  # meanwhile
            statuses = [f.result() for f in flood]
        assert set(statuses[:16]) <= {200, 429} and 200 in statuses[:16], statuses
        assert set(statuses[16:]) <= {200, 429} and 200 in statuses[16:], statuses

        assert server.poll() is None and client.get("/healthz").status_code == 200
    peak = vm_hwm_mb(server.pid)
    assert peak <= RSS_TARGET_MB, f"peak RSS {peak:.0f} MB over the {RSS_TARGET_MB} MB target"
