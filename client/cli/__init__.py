"""The client commands of the `fp8-policy` console script: upload, status, runs, analysis, recommend, configs, gate,
compare, heatmap, frontier, verify, delete, watch, alert.

Belongs here: only the composition of the client command modules and the `--version` option. The commands live
in client/cli/runs.py (upload, status, runs, edit, delete), client/cli/analysis.py (analysis, recommend, gate,
compare, heatmap), client/cli/configs.py (configs), client/cli/frontier.py (frontier, verify) and client/cli/live.py
(watch, alert); the shared options, run references, tables and error handling in client/cli/common.py. Exit codes:
0 ok, 1 when `gate` fails the bar, 2 for usage errors and every `PolicyError` (printed as `error: <Code>:
<detail>` on stderr, no traceback). `register_client_commands(group)`
adds them to the server's group (`service/cli.py`); `cli` is a stand-alone group with only these
(`python -m fp8_policy.client.cli` runs it, client/cli/__main__.py). Tests inject
a `PolicyClient` as `CliRunner.invoke(obj=...)`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from fp8_policy._version import __version__
from fp8_policy.client.cli.analysis import analysis, compare, gate, heatmap, recommend
from fp8_policy.client.cli.common import ClosedPipeGroup
from fp8_policy.client.cli.configs import configs
from fp8_policy.client.cli.frontier import frontier, verify
from fp8_policy.client.cli.live import alert, watch
from fp8_policy.client.cli.runs import delete, edit, runs, status, upload

__all__ = ["COMMANDS", "ClosedPipeGroup", "cli", "main", "register_client_commands", "version_option"]

COMMANDS = (
    upload,
    status,
    runs,
    edit,
    analysis,
    recommend,
    configs,
    gate,
    compare,
    heatmap,
    frontier,
    verify,
    delete,
    watch,
    alert,
)


def version_option() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--version` / `-V` on a group: prints `fp8-policy <version>`, pyproject.toml's version (which setuptools
    reads from `fp8_policy.__version__`), and exits 0."""
    return click.version_option(__version__, "--version", "-V", prog_name="fp8-policy", message="%(prog)s %(version)s")


def register_client_commands(group: click.Group) -> click.Group:
    """Add the client commands to `group` (the `fp8-policy` console script's group in `service/cli.py`)."""
    for command in COMMANDS:
        group.add_command(command)
    return group


@click.group()
@version_option()
def cli() -> None:
    """fp8-policy client: upload FP8 debug logs, read the analysis, get and gate on the recommended policy."""


register_client_commands(cli)


def main() -> None:
    cli()
