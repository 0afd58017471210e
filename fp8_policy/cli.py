"""The `fp8-policy` console script: the client commands always, the server commands when `[server]` is installed.

Belongs here: only the composition of the two command sets; the commands themselves live in
`fp8_policy/client/cli/` (upload, status, runs, analysis, recommend, gate, compare, heatmap; base install)
and `fp8_policy/service/cli.py` (serve, db, and every other server command). This module sits outside both
layers so that `client/` never references the service.

The server commands are looked up lazily: `fp8_policy.service.cli` imports nothing but click at module level
(tests/test_console_script.py keeps it so), so their names are known on the base install too. Whether the
`server` extra is installed is read from this distribution's own metadata (every `Requires-Dist` marked
`extra == "server"` must be installed); when it is not, a server command prints one line naming the extra
and exits with status 2, before any server module is imported.
"""

from __future__ import annotations

import importlib
import re
import sys
from functools import cache
from importlib import metadata
from typing import Any, NoReturn

import click

from fp8_policy.client.cli import ClosedPipeGroup, version_option
from fp8_policy.client.cli import cli as client_cli

DISTRIBUTION = "fp8-policy"
SERVER_EXTRA_HINT = "pip install 'fp8-policy[server]'"
_SERVER_CLI = "fp8_policy.service.cli"
# `Requires-Dist` lines look like `fastapi>=0.121; extra == "server"` (core metadata, PEP 508).
_REQUIREMENT_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_SERVER_MARKER = re.compile(r"""extra\s*==\s*['"]server['"]""")


def missing_server_requirements() -> list[str]:
    """Names of the `server` extra's requirements that are not installed ([] also when running from a checkout
    without installed metadata: the imports then speak for themselves)."""
    try:
        requirements = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    missing = []
    for requirement in requirements:
        requirement_spec, _, marker = requirement.partition(";")
        match = _REQUIREMENT_NAME.match(requirement_spec)
        if match is None or not _SERVER_MARKER.search(marker):
            continue
        try:
            metadata.distribution(match.group(1))
        except metadata.PackageNotFoundError:
            missing.append(match.group(1))
    return missing


@cache
def _server_commands() -> dict[str, click.Command]:
    """The server group's own commands (the client ones it also carries are left out); {} if it cannot load."""
    try:
        module = importlib.import_module(_SERVER_CLI)
    except ImportError:
        return {}
    group: click.Group = module.cli
    return {name: command for name, command in group.commands.items() if name not in client_cli.commands}


def _needs_server_extra(name: str) -> click.Command:
    """A stand-in for server command `name` on an install without the `server` extra: one line, exit 2."""

    def refuse() -> NoReturn:
        click.echo(
            f"error: `fp8-policy {name}` is a server command; install the server extra: {SERVER_EXTRA_HINT}", err=True
        )
        sys.exit(2)

    return click.Command(
        name,
        callback=refuse,
        add_help_option=False,
        help=f"(needs {SERVER_EXTRA_HINT})",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )


class ConsoleGroup(ClosedPipeGroup):
    """Client commands registered up front; server commands resolved on first use; a closed pipe exits 0."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_server_commands()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            return command
        server = _server_commands().get(cmd_name)
        if server is None:
            return None
        return _needs_server_extra(cmd_name) if missing_server_requirements() else server


@click.group(cls=ConsoleGroup)
@version_option()
def cli() -> None:
    """fp8-policy: FP8 precision-policy recommender for Transformer Engine debug logs."""


for _command in client_cli.commands.values():
    cli.add_command(_command)


def main(argv: list[str] | None = None) -> Any:
    """The console-script entry point (`[project.scripts]` in pyproject.toml)."""
    return cli.main(args=argv, prog_name="fp8-policy")


if __name__ == "__main__":
    main()
