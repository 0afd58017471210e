"""Ctrl-C on `make run` (`fp8-policy serve` in a terminal): SIGINT reaches the whole process group - the API process,
its render worker and the forkserver - and the service stops without a worker's KeyboardInterrupt traceback."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx

from bench.service import stop_service, wait_healthy
from tests.support.archives import esm2_tar_gz
from tests.support.service_processes import serve_logged, started_by, wait_gone


def test_sigint_to_the_process_group_stops_the_service_without_a_traceback(tmp_path: Path) -> None:
    # its own process group, as a terminal's foreground job is
    server, url, env = serve_logged(tmp_path, start_new_session=True)
    try:
        wait_healthy(url, server, timeout=120)
        with httpx.Client(base_url=url, timeout=120) as client:
            run = client.post("/api/v1/runs", files={"file": ("esm2.tar.gz", esm2_tar_gz(), "application/gzip")})
            assert run.status_code == 202, run.text
            deadline = time.monotonic() + 120
            while client.get(f"/api/v1/runs/{run.json()['id']}").json()["status"] != "ready":
                assert time.monotonic() < deadline
                time.sleep(0.2)
            image = client.get(f"/api/v1/runs/{run.json()['id']}/heatmap.png")  # a render worker is running now
            assert image.status_code == 200
        os.killpg(server.pid, signal.SIGINT)  # what Ctrl-C does
        server.wait(30)
    finally:
        stop_service(server, timeout=30)
    assert not wait_gone(started_by(env["FP8_POLICY_DATA_DIR"]), 30), "processes of the service still run"
    log = (tmp_path / "serve.err").read_text()
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log[-3000:]
