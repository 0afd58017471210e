"""The real service for the benchmarks: `fp8-policy serve` started on a free loopback port with its own data
directory (SQLite there unless the caller's environment says otherwise), waited for until /healthz answers,
stopped at the end, and its peak RSS read from /proc.

Belongs here: starting, waiting for and stopping the service process, the environment of a cluster of service
processes on PostgreSQL (`cluster_env`), and reading its memory; what is measured
against it stays in the bench module that measures it (run.py, live.py, load.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
SERVE = [sys.executable, "-m", "fp8_policy.service.cli", "serve"]


def cluster_env(pg: Any, store: Path, poll_seconds: float) -> dict[str, str]:
    """The environment every process of a tests/support/cluster.py `Cluster` shares: a fresh database on the throwaway
    PostgreSQL `pg` (tests/support/pg_cluster.py), migrated to head, the archive store in `store`, workers polling for jobs
    every `poll_seconds`."""
    from fp8_policy.db.migrate import upgrade

    database = pg.create_database()
    upgrade(database)
    return {
        "FP8_POLICY_DATABASE_URL": database,
        "FP8_POLICY_ARCHIVE_URL": str(store),
        "FP8_POLICY_JOB_POLL_SECONDS": str(poll_seconds),
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def vm_hwm_mb(pid: int) -> float:
    """Peak resident memory of process `pid` in MB (VmHWM in /proc/<pid>/status); NaN where it is not given."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` and its threads so far (/proc/<pid>/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU seconds every core of this machine has spent busy since boot (/proc/stat's first line: all but idle and
    iowait): minus a process's own CPU over an interval, what everything else on the machine used meanwhile."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def wait_idle(pid: int, quiet: float = 2.5, timeout: float = 60.0) -> float:
    """Wait until process `pid` used under 5 % of a core for `quiet` seconds: the start-up work that serving
    processes do after /healthz already answers (kernel loading, parser buffers, imports in the background) is
    over, as in a service that has been running. Returns the seconds waited. `quiet` must exceed the 1 s the
    service stays idle on purpose after it starts serving (service/app.py WARM_UP_GRACE_SECONDS): with 1 s, a
    run could take the grace for the end of the warm-up, whose 2-3 s of CPU then landed in the figure measured
    next (make bench: live 0.78 M lines/s instead of 1.05 M; 12 live pieces +330 MB RSS with the parser's
    buffers prefaulted meanwhile)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        before = cpu_seconds(pid)
        time.sleep(quiet)
        if cpu_seconds(pid) - before < 0.05 * quiet:
            break
    return time.monotonic() - start


def wait_healthy(url: str, server: subprocess.Popen, timeout: float = 90.0) -> None:
    """Poll `url`/healthz until it answers 200; SystemExit when the process exits first or `timeout` passes.
    One client for all polls: `httpx.get` builds a client, and with it an SSL context, per call (45 ms of CPU on
    the 2-core dev VM, against 0.2 ms for a request of a kept client), beside a service that is starting."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=5) as client:
        while time.monotonic() < deadline:
            if server.poll() is not None:
                raise SystemExit(f"the service exited during start-up (status {server.returncode})")
            try:
                if client.get(f"{url}/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
    raise SystemExit(f"the service did not become healthy in {timeout:g} s")


def start_service(
    data_dir: Path,
    *,
    command: list[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 90.0,
) -> tuple[subprocess.Popen, str]:
    """Start `command` (default `fp8-policy serve`) on a free loopback port without demo runs, with
    FP8_POLICY_DATA_DIR=`data_dir`, `env` (default: this process's environment less FP8_POLICY_DATABASE_URL,
    so the database is SQLite in `data_dir`), and wait until it is healthy; returns (process, base URL).
    The caller stops it with `stop_service`."""
    port = free_port()
    if env is None:
        env = {k: v for k, v in os.environ.items() if k != "FP8_POLICY_DATABASE_URL"}
    server = subprocess.Popen(
        [*(command or SERVE), "--host", "127.0.0.1", "--port", str(port), "--no-demo", "--log-level", "warning"],
        cwd=ROOT,
        env={**env, "FP8_POLICY_DATA_DIR": str(data_dir)},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, server, timeout)
    except BaseException:
        stop_service(server)
        raise
    return server, url


def stop_service(server: subprocess.Popen, timeout: float = 60.0) -> None:
    """SIGTERM (uvicorn's graceful shutdown), then SIGKILL if it has not exited after `timeout` seconds."""
    server.terminate()
    try:
        server.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


@contextmanager
def running_service(data_dir: Path, **options) -> Iterator[tuple[subprocess.Popen, str]]:
    """`start_service` for a with-block: (process, base URL), stopped when the block ends."""
    server, url = start_service(data_dir, **options)
    try:
        yield server, url
    finally:
        stop_service(server)


def wait_run(client: httpx.Client, run_id: int, timeout: float, poll: float = 0.2) -> dict[str, Any]:
    """GET the run until it is ready or failed, or until `timeout` seconds have passed: its last answer."""
    deadline = time.monotonic() + timeout
    while True:
        run: dict[str, Any] = client.get(f"/api/v1/runs/{run_id}").json()
        if run["status"] in ("ready", "failed") or time.monotonic() > deadline:
            return run
        time.sleep(poll)
