"""Test helpers: a service started with its stderr kept (`serve_logged`), which processes a service started, and
waiting for processes to end (Linux /proc)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.service import free_port

ROOT = Path(__file__).resolve().parents[2]


def serve_logged(tmp_path: Path, **popen: Any) -> tuple[subprocess.Popen[bytes], str, dict[str, str]]:
    """`fp8-policy serve` on a free loopback port without demo runs, its data (and SQLite database) in
    tmp_path/data, its stderr written to tmp_path/serve.err; `popen`: more subprocess.Popen options. Returns (the
    process, its base URL, its environment); the caller waits until it is healthy and stops it."""
    port = free_port()
    env = {**os.environ, "FP8_POLICY_DATA_DIR": str(tmp_path / "data")}
    env.pop("FP8_POLICY_DATABASE_URL", None)
    with (tmp_path / "serve.err").open("w") as stderr:
        server = subprocess.Popen(
            [sys.executable, "-m", "fp8_policy.service.cli", "serve", "--port", str(port), "--no-demo"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            **popen,
        )
    return server, f"http://127.0.0.1:{port}", env


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait up to `timeout` seconds for `pids` to end; returns those still alive."""
    deadline = time.monotonic() + timeout
    while (running := [pid for pid in pids if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return running


def started_by(data_dir: str) -> list[int]:
    """The processes whose environment names `data_dir` (a service and what it started: forkserver, render
    workers, multiprocessing's resource tracker), the calling process aside."""
    marker = f"FP8_POLICY_DATA_DIR={data_dir}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if marker in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                    found.append(int(entry))
            except OSError:  # ended meanwhile, or not ours to read
                pass
    return found
