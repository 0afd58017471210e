"""Test helpers: which processes a service started, and waiting for processes to end (Linux /proc)."""

from __future__ import annotations

import os
import time
from pathlib import Path


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
