"""Ctrl-C while `fp8-policy upload --wait` waits, after the bytes landed: the run id is said, not just "Aborted!"."""

from __future__ import annotations

from pathlib import Path

import httpx
from click.testing import CliRunner

import fp8_policy.client.client as client_module
from fp8_policy.client.cli import cli
from tests.client.fakes import run_body


def test_ctrl_c_while_waiting_names_the_uploaded_run(mock_client, tmp_path: Path, monkeypatch) -> None:
    log = tmp_path / "stats.log"
    log.write_text("2026-01-15 23:06:40,060 - INFO - model.fc1_gradient_underflows% \t iteration=0 \t value=0.1\n")

    def service(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            return httpx.Response(202, json=run_body(41, status="queued", name="job", project="p"))
        return httpx.Response(200, json=run_body(41, status="processing", name="job", project="p"))

    def interrupted(_seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(client_module, "_sleep", interrupted)
    result = CliRunner().invoke(cli, ["upload", str(log), "--wait"], obj=mock_client(service))

    assert result.exit_code == 130
    assert "stopped waiting: run 41 (p/job) was uploaded" in result.stderr
    assert "`fp8-policy status 41`" in result.stderr
    assert "Traceback" not in result.output
