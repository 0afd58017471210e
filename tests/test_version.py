"""One version: `fp8_policy.__version__` is what pyproject.toml builds with, what `fp8-policy --version` prints, what
the client sends as its User-Agent and what the API document states (tests/test_wheel.py checks an installed wheel)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

import fp8_policy
import fp8_policy.cli as console
from fp8_policy.client import _http
from fp8_policy.client.cli import cli as client_cli

ROOT = Path(__file__).resolve().parents[1]


def test_the_version_is_a_release_number() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+([.-]?(a|b|rc|dev|post)\d+)?", fp8_policy.__version__)


def test_pyproject_reads_the_version_from_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())

    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "fp8_policy._version.__version__"}


def test_setuptools_builds_with_that_version() -> None:
    done = subprocess.run(
        [sys.executable, "setup.py", "--version"], cwd=ROOT, capture_output=True, text=True, check=True
    )

    assert done.stdout.strip().splitlines()[-1] == fp8_policy.__version__


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_the_console_script_prints_the_version(flag: str) -> None:
    result = CliRunner().invoke(console.cli, [flag])

    assert result.exit_code == 0
    assert result.stdout == f"fp8-policy {fp8_policy.__version__}\n"


def test_the_client_group_and_the_server_group_print_it_too() -> None:
    from fp8_policy.service.cli import cli as server_cli

    for group in (client_cli, server_cli):
        assert CliRunner().invoke(group, ["--version"]).stdout == f"fp8-policy {fp8_policy.__version__}\n"


def test_the_version_option_works_in_a_fresh_interpreter() -> None:
    script = "import fp8_policy.cli as c\nc.main(['--version'])\n"
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)

    assert done.returncode == 0, done.stderr
    assert done.stdout == f"fp8-policy {fp8_policy.__version__}\n"


def test_user_agent_and_api_document_carry_the_version() -> None:
    from fp8_policy.service.app import create_app
    from fp8_policy.service.settings import Settings

    assert _http.USER_AGENT.removeprefix("fp8-policy-client/") == fp8_policy.__version__
    assert create_app(Settings(_env_file=None)).openapi()["info"]["version"] == fp8_policy.__version__
