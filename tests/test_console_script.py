"""The `fp8-policy` console script (fp8_policy/cli.py): client commands always, server commands lazily.

The base install lacks the server's dependencies; these tests simulate that in fresh interpreters by making
those imports fail, and check the real thing (a wheel in a clean venv) in tests/test_wheel.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import fp8_policy.cli as console
from fp8_policy.service.settings import get_settings

ROOT = Path(__file__).resolve().parents[1]
# Top-level modules that only the `server` extra installs.
SERVER_ONLY = (
    "fastapi",
    "starlette",
    "uvicorn",
    "python_multipart",
    "pydantic",
    "pydantic_settings",
    "sqlalchemy",
    "alembic",
    "psycopg",
    "numpy",
    "numba",
    "isal",
    "sklearn",
    "threadpoolctl",
    "matplotlib",
)
_BLOCKER = (
    "import importlib.abc, sys\n"
    "class Block(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    f"        if name.partition('.')[0] in {SERVER_ONLY!r}:\n"
    "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
    "sys.meta_path.insert(0, Block())\n"
)


def _python(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _BLOCKER + script], cwd=ROOT, capture_output=True, text=True)


def test_the_console_script_loads_no_server_module() -> None:
    done = _python("import json, sys\nimport fp8_policy.cli\nprint(json.dumps(sorted(sys.modules)))")

    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert [m for m in loaded if m.startswith(("fp8_policy.service", "fp8_policy.db", "fp8_policy.policy"))] == []


def test_server_commands_are_listed_without_the_server_dependencies() -> None:
    done = _python(
        "from fp8_policy.cli import cli\nimport click\nprint(' '.join(cli.list_commands(click.Context(cli))))"
    )

    assert done.returncode == 0, done.stderr
    names = set(done.stdout.split())
    assert {"serve", "db", "upload", "gate", "recommend"} <= names


def test_a_server_command_without_the_extra_prints_one_line_naming_it(monkeypatch) -> None:
    monkeypatch.setattr(console, "missing_server_requirements", lambda: ["fastapi"])

    result = CliRunner().invoke(console.cli, ["serve", "--host", "0.0.0.0", "--port", "9"])

    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        "error: `fp8-policy serve` is a server command; install the server extra: pip install 'fp8-policy[server]'\n"
    )
    sub = CliRunner().invoke(console.cli, ["db", "upgrade", "--help"])
    assert (sub.exit_code, sub.stderr.count("\n")) == (2, 1) and "fp8-policy db" in sub.stderr


def test_a_client_command_never_asks_for_the_server_extra(monkeypatch) -> None:
    monkeypatch.setattr(console, "missing_server_requirements", lambda: ["fastapi"])

    result = CliRunner().invoke(console.cli, ["status", "1", "--url", "http://127.0.0.1:9"])

    assert result.exit_code == 2
    assert result.stderr.startswith("error: ConnectionFailed: ")


def test_an_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(console.cli, ["uplod"])

    assert result.exit_code == 2
    assert "No such command 'uplod'" in result.stderr


def test_missing_server_requirements_reads_the_server_extra_of_the_metadata(monkeypatch) -> None:
    assert console.missing_server_requirements() == []  # the dev install has them all
    fake = [
        "click>=8.1",
        'fastapi>=0.121; extra == "server"',
        'no-such-dist-fp8>=1; extra == "server"',
        "other-missing-fp8>=1; extra == 'dev'",
        'psycopg[binary]>=3.2; extra == "server"',
    ]
    monkeypatch.setattr(console.metadata, "requires", lambda name: fake)

    assert console.missing_server_requirements() == ["no-such-dist-fp8"]


@pytest.mark.parametrize("name", ["serve", "db"])
def test_the_installed_script_resolves_the_real_server_commands(name: str) -> None:
    from fp8_policy.service import cli as service_cli

    assert console.cli.get_command(click.Context(console.cli), name) is service_cli.cli.commands[name]


def test_db_upgrade_through_the_console_script(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FP8_POLICY_DATABASE_URL", f"sqlite:///{tmp_path / 'c.db'}")
    monkeypatch.setenv("FP8_POLICY_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(console.cli, ["db", "upgrade"])
    finally:
        get_settings.cache_clear()

    assert result.exit_code == 0, result.output
    assert result.stdout == "database at head\n"
