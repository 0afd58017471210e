"""The CI example parses and uses the commands as they are, and `client/` imports nothing of the service side."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import yaml
from click.testing import CliRunner

from fp8_policy.client.cli import cli
from tests.client.fakes import FakeService

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "examples" / "github-actions.yml"


def _fp8_commands(workflow: dict) -> list[list[str]]:
    """Every `fp8-policy ...` command of the workflow's run steps, as argv lists (without the program)."""
    commands = []
    for step in workflow["jobs"]["train-and-gate"]["steps"]:
        script = step.get("run", "").replace("\\\n", " ")
        for line in script.splitlines():
            if line.strip().startswith("fp8-policy "):
                commands.append(shlex.split(line.split(">")[0])[1:])
    return commands


def test_the_workflow_says_how_to_get_its_token_with_a_command_that_exists() -> None:
    """It once said the token was "ignored by the service today"; the service checks tokens."""
    from fp8_policy.service.auth.cli import token

    text = WORKFLOW.read_text()
    match = re.search(r"`fp8-policy token (create [^`]*)`", text)

    assert "ignored by the service" not in text and match is not None
    name, *args = match[1].split()
    create = token.get_command(click.Context(token), name)
    assert create is not None
    assert create.make_context(name, args).params["scope"] == "upload"


def test_the_github_actions_example_is_a_valid_workflow() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    steps = workflow["jobs"]["train-and-gate"]["steps"]

    assert workflow[True] == {"workflow_dispatch": None, "schedule": [{"cron": "0 2 * * *"}]}  # YAML 1.1: on -> True
    assert [c[0] for c in _fp8_commands(workflow)] == ["upload", "gate", "recommend"]
    assert any(step.get("uses", "").startswith("actions/upload-artifact@") for step in steps)
    assert "pip install fp8-policy" in [step.get("run") for step in steps]


def _substitute(arg: str, log_dir: Path, summary: Path) -> str:
    """Workflow expressions and variables -> values a local run can use."""
    if arg == "$LOG_DIR":
        return str(log_dir)
    if arg == "$GITHUB_STEP_SUMMARY":
        return str(summary)
    if "run_id" in arg:
        return "7"
    return "x" if "$" in arg else arg


def test_the_example_commands_run_against_a_fake_service(mock_client, tmp_path: Path, clock, monkeypatch) -> None:
    log = tmp_path / "logs" / "nvdlfw_inspect_statistics_logs" / "nvdlfw_inspect_globalrank-0.log"
    log.parent.mkdir(parents=True)
    log.write_text("stats\n")
    client = mock_client(FakeService())
    monkeypatch.chdir(tmp_path)  # recommend -o writes a relative path
    for argv in _fp8_commands(yaml.safe_load(WORKFLOW.read_text())):
        argv = [_substitute(arg, tmp_path / "logs", tmp_path / "summary.md") for arg in argv]
        result = CliRunner().invoke(cli, argv, obj=client)
        assert result.exit_code in (0, 1), (argv, result.output)  # 1: the fake run fails the gate
    assert (tmp_path / "summary.md").read_text().startswith("## FP8 policy gate: FAIL")


def test_client_imports_nothing_from_service_db_or_policy() -> None:
    code = (
        "import json, sys, fp8_policy, fp8_policy.client, fp8_policy.client.cli, fp8_policy.client.gate, "
        "fp8_policy.client.packing; print(json.dumps(sorted({'.'.join(m.split('.')[:2]) for m in sys.modules})))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = set(json.loads(done.stdout))

    assert not loaded & {"fp8_policy.service", "fp8_policy.db", "fp8_policy.policy", "fastapi", "sqlalchemy", "numpy"}
