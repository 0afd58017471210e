"""Issue 20 item 5: render worker processes (and their forkserver) end when the API process is killed.

A child process stands in for the API: it starts the light render lane's worker, reports the worker's and the
forkserver's pids, and is then killed with SIGKILL (no clean-up of its own runs).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from fp8_policy.service.visual.pool import exit_with_parent
from tests.support.service_processes import alive, wait_gone

API_STAND_IN = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from fp8_policy.service.settings import Settings
    from fp8_policy.service.visual.pool import Renderer

    renderer = Renderer(Settings(_env_file=None, data_dir=Path(sys.argv[1]), render_processes=True))
    pool = renderer.light._pool()
    worker, forkserver = pool.submit(os.getpid).result(120), pool.submit(os.getppid).result(120)
    print(worker, forkserver, flush=True)
    time.sleep(600)
    """
)


def test_a_killed_api_leaves_no_render_processes(tmp_path: Path) -> None:
    api = subprocess.Popen(
        [sys.executable, "-c", API_STAND_IN, str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    )
    pids: list[int] = []
    try:
        line = api.stdout.readline()
        assert line, "the stand-in API did not start its render worker"
        pids = [int(pid) for pid in line.split()]
        assert all(alive(pid) for pid in pids) and api.pid not in pids
        api.send_signal(signal.SIGKILL)
        api.wait(timeout=10)
        assert wait_gone(pids, timeout=15) == [], "render processes outlived the API process"
    finally:
        api.kill()
        for pid in pids:  # never leave them behind when the assertion failed
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_worker_whose_api_is_already_gone_exits_at_once(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child ends in exit_with_parent or _exit(3)
        try:
            exit_with_parent(gone.pid)
            time.sleep(10)
        finally:
            os._exit(3)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
