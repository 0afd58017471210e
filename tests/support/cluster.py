"""Real `fp8-policy serve` and `fp8-policy worker` processes on loopback, for the scale-out test and the
benchmark: N API processes (`--no-ingest`) and M workers sharing one database and one archive store.

Each process gets its own data directory (nothing local is shared: archives go through the store), its
output in a log file, and is stopped (SIGTERM, then SIGKILL) when the cluster closes.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.service import wait_healthy

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Member:
    name: str
    process: subprocess.Popen
    log: Path
    url: str | None = None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class Cluster:
    """`env`: FP8_POLICY_DATABASE_URL, FP8_POLICY_ARCHIVE_URL, ... shared by every process."""

    workdir: Path
    env: dict[str, str]
    apis: list[Member] = field(default_factory=list)
    workers: list[Member] = field(default_factory=list)

    def _spawn(self, name: str, args: list[str]) -> Member:
        data_dir = self.workdir / name
        data_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.env, "FP8_POLICY_DATA_DIR": str(data_dir)}
        log = self.workdir / f"{name}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "fp8_policy.service.cli", *args],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        return Member(name, process, log)

    def start_api(self, *extra: str, ingest: bool = False, migrate: bool = False) -> Member:
        """An API process; `ingest=True` is the embedded setup (it runs the ingest jobs itself)."""
        port = free_port()
        member = self._spawn(
            f"api{len(self.apis)}",
            [
                "serve",
                "--ingest" if ingest else "--no-ingest",
                "--migrate" if migrate else "--no-migrate",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warning",
                *extra,
            ],
        )
        member.url = f"http://127.0.0.1:{port}"
        self.apis.append(member)
        return member

    def start_worker(self, *extra: str) -> Member:
        member = self._spawn(f"worker{len(self.workers)}", ["worker", "--log-level", "info", *extra])
        self.workers.append(member)
        return member

    @staticmethod
    def peak_rss_mb(member: Member) -> float:
        """VmHWM of a running member (its peak resident set so far)."""
        for line in Path(f"/proc/{member.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def wait_healthy(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        for member in self.apis:
            try:
                wait_healthy(member.url, member.process, max(0.1, deadline - time.monotonic()))
            except SystemExit as exc:  # bench.service's way of saying "exited" / "not healthy in time"
                raise RuntimeError(f"{member.name}: {exc}:\n{member.log_tail()}") from None

    def close(self) -> None:
        members = self.apis + self.workers
        for member in members:
            if member.process.poll() is None:
                member.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for member in members:
            try:
                member.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                member.process.kill()
                member.process.wait()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
