"""Plumbing shared by the client commands of the `fp8-policy` console script (client/cli/).

Belongs here: the options every client command takes (--url / --token / --json), how a run is named on the
command line (an id or project/name), the client connection, the plain-text table and the error handling
(every `PolicyError` printed as `error: <Code>: <detail>` on stderr, exit code 2, no traceback). The commands
themselves live in client/cli/runs.py, client/cli/analysis.py and client/cli/live.py.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from fp8_policy.client.errors import PolicyError

if TYPE_CHECKING:
    from fp8_policy.client.client import PolicyClient

DEFAULT_URL = "http://127.0.0.1:8000"
MAX_CELL = 90


# ----------------------------------------------------------------------------------------------- plumbing
def client_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--url / --token / --json on every client command, and PolicyError -> `error: ...` with exit code 2."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except BrokenPipeError:  # `fp8-policy recommend 7 | head -1`: the reader left; not an error
            silence_stdout()
            raise click.exceptions.Exit(0) from None
        except (PolicyError, OSError) as exc:
            code, detail = (exc.error, exc.detail) if isinstance(exc, PolicyError) else (type(exc).__name__, str(exc))
            click.echo(f"error: {code}: {detail}", err=True)
            raise click.exceptions.Exit(2) from None

    for option in reversed(
        (
            click.option(
                "--url",
                envvar="FP8_POLICY_URL",
                default=DEFAULT_URL,
                show_default=True,
                help="Service base URL (env FP8_POLICY_URL).",
            ),
            click.option(
                "--token",
                envvar="FP8_POLICY_TOKEN",
                default=None,
                help="Access token, sent as 'Authorization: Bearer' (env FP8_POLICY_TOKEN).",
            ),
            click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON."),
        )
    ):
        run = option(run)
    return run


def silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again (Python docs, "Note on
    SIGPIPE": https://docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (e.g. click's CliRunner)
        pass


class ClosedPipeGroup(click.Group):
    """A command group whose commands end quietly with status 0 when the reader of stdout has gone
    (`fp8-policy token list | head -1`), as the client commands do (`client_options`); click's own handler in
    `main` would exit 1. The server groups (`service/cli.py`, the console script's) are of this class."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            silence_stdout()
            raise click.exceptions.Exit(0) from None


if TYPE_CHECKING:  # click >= 8.2 types ParamType as a generic; subscripting it fails at run time on 8.1
    _RunRefBase = click.ParamType[int | tuple[str, str]]
else:
    _RunRefBase = click.ParamType


class RunRefType(_RunRefBase):
    """A run named by its id (`7`) or as `project/name` (the newest run of that name in the project)."""

    name = "RUN"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | tuple[str, str]:
        text = str(value).strip()
        if text.isdigit():
            return int(text)
        project, sep, name = text.partition("/")
        if sep and project and name:
            return project, name
        self.fail(f"{value!r} is neither a run id nor project/name", param, ctx)


RUN_REF = RunRefType()


def resolve_run(client: PolicyClient, ref: int | tuple[str, str]) -> int:
    """The id of a run given as an id or as (project, name)."""
    if isinstance(ref, int):
        return ref
    return int(client.find_run(*ref)["id"])


@dataclass(frozen=True)
class PolicySettings:
    """--threshold NAME=VALUE / --gpu / --te-version as given on the command line (`policy_options`)."""

    thresholds: tuple[str, ...] = ()
    gpu: str | None = None
    te_version: str | None = None

    def overrides(self, previous_run: int | None = None) -> dict[str, Any]:
        """The POST .../recommendation body from these settings and --previous-run."""
        out: dict[str, Any] = {}
        parsed: dict[str, float] = {}
        for item in self.thresholds:
            name, sep, value = item.partition("=")
            try:
                parsed[name.strip()] = float(value)
            except ValueError:
                sep = ""
            if not sep or not name.strip():
                raise click.BadParameter(f"{item!r} is not NAME=NUMBER (e.g. critical=3)", param_hint="--threshold")
        if parsed:
            out["thresholds"] = parsed
        if self.gpu:
            out["gpu"] = self.gpu
        if self.te_version:
            out["te_version"] = self.te_version
        if previous_run is not None:
            out["previous_run"] = previous_run
        return out


def policy_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--threshold / --gpu / --te-version: recompute the recommendation (POST) with these settings; the command
    receives them as one `policy: PolicySettings` argument."""

    @functools.wraps(command)
    def run(*args: Any, thresholds: tuple[str, ...], gpu: str | None, te_version: str | None, **kwargs: Any) -> Any:
        return command(*args, policy=PolicySettings(thresholds, gpu, te_version), **kwargs)

    for option in reversed(
        (
            click.option(
                "--threshold",
                "thresholds",
                multiple=True,
                metavar="NAME=VALUE",
                help="Analysis threshold, repeatable (e.g. --threshold critical=3 --threshold severe=6).",
            ),
            click.option("--gpu", help="GPU the policy is for: H100, B200, sm_90, 9.0, ... (default: run metadata)."),
            click.option("--te-version", help="Transformer Engine version the config targets, e.g. 2.13."),
        )
    ):
        run = option(run)
    return run


@contextmanager
def connect(url: str, token: str | None) -> Iterator[PolicyClient]:
    """The injected client (tests: `invoke(obj=PolicyClient(...))`), or a new one closed on exit."""
    from fp8_policy.client.client import PolicyClient  # httpx with it: only a command that talks to a service

    injected = click.get_current_context().obj
    if isinstance(injected, PolicyClient):
        yield injected
        return
    with PolicyClient(url, token=token) as client:
        yield client


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def cell(value: Any, width: int | None = MAX_CELL) -> str:
    if isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, (list, tuple)):
        text = ", ".join(str(v) for v in value)
    else:
        text = "" if value is None else str(value)
    return text if width is None or len(text) <= width else text[: width - 1] + "…"


def table(headers: list[str], rows: list[list[Any]], width: int | None = MAX_CELL) -> str:
    """Plain text columns, left-aligned, two spaces apart; cells cut at `width` characters (None: never). No rows:
    the header line alone."""
    cells = [[cell(v, width) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def echo_rows(headers: list[str], rows: list[list[Any]], none: str) -> None:
    """A listing: its table on stdout, or, with no rows, `none` on stderr and nothing on stdout (as kubectl's
    "No resources found"), so a script reading stdout sees an empty list and a person is told why."""
    if rows:
        click.echo(table(headers, rows))
    else:
        click.echo(none, err=True)


def parse_metadata(_ctx: click.Context, _param: click.Parameter, value: str | None) -> dict[str, Any] | None:
    """--metadata '{"gpu": "h100"}' or --metadata @meta.json."""
    if value is None:
        return None
    try:
        text = Path(value[1:]).read_text() if value.startswith("@") else value
        parsed = json.loads(text)
    except (OSError, ValueError) as exc:
        raise click.BadParameter(f"not a JSON object or @file: {exc}") from exc
    if not isinstance(parsed, dict):
        raise click.BadParameter("must be a JSON object")
    return parsed
