"""The server side of the `fp8-policy` console script: `db upgrade` and `serve`."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from click.testing import CliRunner
from sqlalchemy import create_engine, inspect

from fp8_policy.service.cli import cli
from fp8_policy.service.settings import get_settings

ROOT = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_db_upgrade_creates_every_table(tmp_path: Path, monkeypatch) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("FP8_POLICY_DATABASE_URL", url)
    monkeypatch.setenv("FP8_POLICY_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(cli, ["db", "upgrade"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    assert "database at head" in result.output
    tables = set(inspect(create_engine(url)).get_table_names())
    assert {"runs", "run_tags", "layers", "series", "alembic_version"} <= tables


def test_serve_starts_uvicorn_on_the_given_port_with_a_migrated_database(tmp_path: Path) -> None:
    port = _free_port()
    env = {**os.environ, "FP8_POLICY_DATA_DIR": str(tmp_path / "data")}
    env.pop("FP8_POLICY_DATABASE_URL", None)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fp8_policy.service.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-demo",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        health, starting = None, []
        while time.monotonic() < deadline and server.poll() is None:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
            except httpx.TransportError:
                time.sleep(0.2)
                continue
            if health.status_code == 200:
                break
            starting.append((health.status_code, health.json()["status"]))  # answered while the app loads
            time.sleep(0.05)
        assert health is not None and health.status_code == 200, "service did not answer /healthz"
        assert health.json() == {"status": "ok", "database": "ok"}
        assert set(starting) <= {(503, "starting")}, "before it is ready, /healthz says so"
        listing = httpx.get(f"http://127.0.0.1:{port}/api/v1/runs", timeout=5)
        assert listing.status_code == 200
        assert listing.json() == {"items": [], "next_cursor": None}
        # a new user's first look, through the CLI's own HTTP client: nothing on stdout, a hint on stderr
        first_look = CliRunner().invoke(cli, ["runs", "--url", f"http://127.0.0.1:{port}"])
        assert (first_look.exit_code, first_look.stdout) == (0, ""), first_look.output
        assert first_look.stderr.startswith("no runs yet")
        assert (tmp_path / "data" / "fp8_policy.db").exists()
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert server.returncode is not None


def test_serve_marks_its_app_long_running_and_a_plain_app_is_not(tmp_path: Path, monkeypatch) -> None:
    """Only a serving process freezes its start-up objects out of the garbage collector (warm_up_process): the
    test suite builds app after app in one process, and frozen cycles are never collected."""
    import uvicorn

    from fp8_policy.service.app import create_app

    served = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: served.append(self.config.app))
    monkeypatch.setenv("FP8_POLICY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("FP8_POLICY_DATABASE_URL", raising=False)
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(cli, ["serve", "--port", str(_free_port()), "--no-demo"])
        plain = create_app(get_settings())
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    assert [app.state.long_running for app in served] == [True]
    assert plain.state.long_running is False


def test_warm_up_process_freezes_what_start_up_left() -> None:
    import gc

    from fp8_policy.service.ingest.worker import warm_up_process

    before = gc.get_freeze_count()
    try:
        warm_up_process()
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()
