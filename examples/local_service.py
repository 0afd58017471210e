"""A throwaway fp8-policy service for the closed loops, and the upload step they share.

Belongs here: starting `fp8-policy serve` on a free loopback port with a temporary SQLite database (stopped again
on exit), or the same app in this process (`in_process_service`), and uploading one log tree and waiting for its analysis. Must not be here: training or reports.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fp8_policy import PolicyClient


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def local_service() -> Iterator[str]:
    """`fp8-policy serve` on a free loopback port with a throwaway SQLite database; yields its URL."""
    with tempfile.TemporaryDirectory(prefix="fp8-closed-loop-") as data_dir:
        port = _free_port()
        env = {
            **os.environ,
            "FP8_POLICY_DATA_DIR": data_dir,
            "FP8_POLICY_DATABASE_URL": f"sqlite:///{Path(data_dir) / 'fp8_policy.db'}",
        }
        log = open(Path(data_dir) / "service.log", "w")  # noqa: SIM115 - closed below
        command = [sys.executable, "-m", "fp8_policy.service.cli", "serve", "--host", "127.0.0.1"]
        command += ["--port", str(port), "--no-demo", "--log-level", "warning"]
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            with PolicyClient(url) as api:
                deadline = time.monotonic() + 120
                while True:
                    try:
                        api.health()
                        break
                    except Exception:
                        if process.poll() is not None or time.monotonic() > deadline:
                            raise RuntimeError(
                                "the service did not start: " + (Path(data_dir) / "service.log").read_text()[-2000:]
                            ) from None
                        time.sleep(0.5)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()


@contextlib.contextmanager
def in_process_service() -> Iterator[PolicyClient]:
    """The service's app inside this process on a throwaway SQLite database, and a `PolicyClient` talking to it
    through FastAPI's test transport (no port, no subprocess: seconds instead of a server start-up)."""
    from fastapi.testclient import TestClient

    from fp8_policy.db.migrate import upgrade
    from fp8_policy.service.app import create_app
    from fp8_policy.service.settings import Settings

    with tempfile.TemporaryDirectory(prefix="fp8-closed-loop-") as data_dir:
        database_url = f"sqlite:///{Path(data_dir) / 'fp8_policy.db'}"
        upgrade(database_url)
        settings = Settings(_env_file=None, data_dir=Path(data_dir) / "data", database_url=database_url)
        # TestClient runs the lifespan (engine, ingest worker); its transport carries PolicyClient's requests,
        # addressed to localhost: a service without tokens answers only this machine's names (service/auth/hosts.py)
        app_client = TestClient(create_app(settings), base_url="http://localhost")
        with app_client as app, PolicyClient(str(app.base_url), transport=app._transport) as api:
            yield api


def upload(api: PolicyClient, log_dir: Path, name: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """Upload `log_dir` to the closed-loop project and wait for its analysis; every line must have been read."""
    run: dict[str, Any] = api.wait(
        api.upload(log_dir, name=name, project="closed-loop", metadata=metadata, progress=False)["id"], timeout=600
    )
    if run["lines_skipped"]:
        raise RuntimeError(f"{name}: the service skipped {run['lines_skipped']} lines")
    return run
