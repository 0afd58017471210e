"""The client commands of the `fp8-policy` console script: upload, status, runs, analysis, recommend, gate, compare, heatmap.

Belongs here: click options, output (readable columns, or `--json` for scripts) and exit codes: 0 ok,
1 when `gate` fails the bar, 2 for usage errors and every `PolicyError` (printed as `error: <Code>: <detail>`
on stderr, no traceback). `register_client_commands(group)` adds them to the server's group (`service/cli.py`);
`cli` is a stand-alone group with only these. Tests inject a `PolicyClient` as `CliRunner.invoke(obj=...)`.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from fp8_policy.client import gate as gating
from fp8_policy.client.client import FORMATS, PolicyClient
from fp8_policy.client.errors import PolicyError

DEFAULT_URL = "http://127.0.0.1:8000"
MAX_CELL = 90
WIDE_COLUMNS = tuple(f"{t}_underflow_{s}" for t in ("gradient", "activation", "weight") for s in ("max", "last"))


# ----------------------------------------------------------------------------------------------- plumbing
def _client_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--url / --token / --json on every client command, and PolicyError -> `error: ...` with exit code 2."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except BrokenPipeError:  # `fp8-policy recommend 7 | head -1`: the reader left; not an error
            _silence_stdout()
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


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again (Python docs, "Note on
    SIGPIPE": https://docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (e.g. click's CliRunner)
        pass


class ClosedPipeGroup(click.Group):
    """A command group whose commands end quietly with status 0 when the reader of stdout has gone
    (`fp8-policy token list | head -1`), as the client commands do (`_client_options`); click's own handler in
    `main` would exit 1. The server groups (`service/cli.py`, the console script's) are of this class."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            _silence_stdout()
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


def _run_id(client: PolicyClient, ref: int | tuple[str, str]) -> int:
    """The id of a run given as an id or as (project, name)."""
    if isinstance(ref, int):
        return ref
    return int(client.find_run(*ref)["id"])


def _overrides(
    thresholds: tuple[str, ...], gpu: str | None, te_version: str | None, previous_run: int | None = None
) -> dict[str, Any]:
    """The POST .../recommendation body from --threshold NAME=VALUE, --gpu, --te-version, --previous-run."""
    out: dict[str, Any] = {}
    parsed: dict[str, float] = {}
    for item in thresholds:
        name, sep, value = item.partition("=")
        try:
            parsed[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise click.BadParameter(f"{item!r} is not NAME=NUMBER (e.g. critical=3)", param_hint="--threshold")
    if parsed:
        out["thresholds"] = parsed
    if gpu:
        out["gpu"] = gpu
    if te_version:
        out["te_version"] = te_version
    if previous_run is not None:
        out["previous_run"] = previous_run
    return out


def _policy_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--threshold / --gpu / --te-version: recompute the recommendation (POST) with these settings."""
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
        command = option(command)
    return command


@contextmanager
def _connect(url: str, token: str | None) -> Iterator[PolicyClient]:
    """The injected client (tests: `invoke(obj=PolicyClient(...))`), or a new one closed on exit."""
    injected = click.get_current_context().obj
    if isinstance(injected, PolicyClient):
        yield injected
        return
    with PolicyClient(url, token=token) as client:
        yield client


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def _cell(value: Any, width: int | None = MAX_CELL) -> str:
    if isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, (list, tuple)):
        text = ", ".join(str(v) for v in value)
    else:
        text = "" if value is None else str(value)
    return text if width is None or len(text) <= width else text[: width - 1] + "…"


def _table(headers: list[str], rows: list[list[Any]], width: int | None = MAX_CELL) -> str:
    """Plain text columns, left-aligned, two spaces apart; cells cut at `width` characters (None: never)."""
    cells = [[_cell(v, width) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def _run_summary(run: dict[str, Any]) -> str:
    rows: list[list[Any]] = [
        ["run", f"{run['id']}  {run.get('name') or ''}".rstrip()],
        ["project", run.get("project")],
        ["status", run.get("status")],
        ["tags", run.get("tags") or "-"],
    ]
    if run.get("error"):
        rows.append(["error", run["error"]])
    if run.get("status") == "ready":
        rows += [
            ["ranks", run.get("ranks")],
            ["layers", run.get("layer_count")],
            ["points", run.get("points")],
            ["iterations", f"{run.get('iteration_min')}..{run.get('iteration_max')}"],
            [
                "lines",
                f"read {run.get('lines_read')}, skipped {run.get('lines_skipped')}, "
                f"duplicated {run.get('lines_duplicated')}",
            ],
        ]
    return "\n".join(f"{key:<11}{_cell(value)}" for key, value in rows)


def _metadata(_ctx: click.Context, _param: click.Parameter, value: str | None) -> dict[str, Any] | None:
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


# ----------------------------------------------------------------------------------------------- commands
@click.command()
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--name", help="Run name (default: none).")
@click.option("--project", help="Project (the service's default when omitted).")
@click.option("--tags", help="Comma-separated tags, e.g. nightly,h100.")
@click.option("--metadata", callback=_metadata, help='JSON object or @file: {"hidden_size": 1280, "gpu": "h100"}.')
@click.option("--wait", "wait_", is_flag=True, help="Wait until the run is ready (exit 2 if ingest fails).")
@click.option("--timeout", default=600.0, show_default=True, help="Seconds --wait waits.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: when stderr is a terminal).")
@_client_options
def upload(
    path: Path,
    name: str | None,
    project: str | None,
    tags: str | None,
    metadata: dict[str, Any] | None,
    wait_: bool,
    timeout: float,
    progress: bool | None,
    url: str,
    token: str | None,
    as_json: bool,
) -> None:
    """Upload an fp8_log_dir (only its nvdlfw_inspect logs, packed to tar.gz) or one archive/log file."""
    with _connect(url, token) as client:
        run = client.upload(path, name=name, project=project, tags=tags, metadata=metadata, progress=progress)
        if wait_:
            run = client.wait(run["id"], timeout=timeout)
    if as_json:
        return _echo_json(run)
    click.echo(_run_summary(run))


@click.command()
@click.argument("run_ref", metavar="RUN", type=RUN_REF)
@_client_options
def status(run_ref: int | tuple[str, str], url: str, token: str | None, as_json: bool) -> None:
    """A run's status and ingest figures (RUN: an id or project/name)."""
    with _connect(url, token) as client:
        run = client.run(_run_id(client, run_ref))
    if as_json:
        return _echo_json(run)
    click.echo(_run_summary(run))


@click.command()
@click.option("--project")
@click.option("--status", "status_", type=click.Choice(["queued", "processing", "ready", "failed"]))
@click.option("--tag")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 200))
@_client_options
def runs(
    project: str | None, status_: str | None, tag: str | None, limit: int, url: str, token: str | None, as_json: bool
) -> None:
    """The newest runs (one page)."""
    with _connect(url, token) as client:
        page = client.runs(project=project, status=status_, tag=tag, limit=limit)
    if as_json:
        return _echo_json(page)
    rows = [
        [r["id"], r.get("name"), r.get("project"), r.get("status"), r.get("layer_count"), r.get("created_at")]
        for r in page["items"]
    ]
    click.echo(_table(["id", "name", "project", "status", "layers", "created"], rows))


@click.command()
@click.argument("run_ref", metavar="RUN", type=RUN_REF)
@click.option("--wide", is_flag=True, help="Every layer with its underflow columns, cells not shortened.")
@_client_options
def analysis(run_ref: int | tuple[str, str], wide: bool, url: str, token: str | None, as_json: bool) -> None:
    """Findings (pattern, severity, layers) and the worst layers of a ready run (RUN: an id or project/name)."""
    with _connect(url, token) as client:
        result = client.analysis(_run_id(client, run_ref))
    if as_json:
        return _echo_json(result)
    width = None if wide else MAX_CELL
    findings = [
        [f.get("severity"), f.get("label") or f.get("pattern"), f.get("layers"), f.get("summary")]
        for f in result["findings"]
    ]
    click.echo(_table(["severity", "pattern", "layers", "summary"], findings, width))
    if wide:
        columns = ["name", "status", "severity", "worst_signal", "worst_level", *WIDE_COLUMNS, "patterns"]
        rows = [[row.get(c) for c in columns] for row in result.get("layers", [])]
        click.echo(
            "\n"
            + _table(
                [
                    "layer",
                    "status",
                    "severity",
                    "worst signal",
                    "level %",
                    *(c.replace("_underflow_", " uf ") for c in WIDE_COLUMNS),
                    "patterns",
                ],
                rows,
                None,
            )
        )
        for note in result.get("notes", []):
            click.echo(f"note: {note}")
        return None
    worst = gating.worst_layers(result.get("layers", []))
    if worst:
        rows = [
            [r.get("name"), r.get("severity"), r.get("worst_signal"), r.get("worst_level"), r.get("patterns")]
            for r in worst
        ]
        click.echo("\n" + _table(["layer", "severity", "worst signal", "level %", "patterns"], rows))
    for note in result.get("notes", []):
        click.echo(f"note: {note}")


@click.command()
@click.argument("run_ref", metavar="RUN", type=RUN_REF)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="json", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to FILE.")
@click.option("--summary", "summary", is_flag=True, help="Print a human summary instead of the JSON.")
@click.option(
    "--previous-run",
    type=RUN_REF,
    help="The run before this one (id or project/name): a problem that "
    "followed a moved BF16 boundary is not answered with a wider one.",
)
@_policy_options
@_client_options
def recommend(
    run_ref: int | tuple[str, str],
    fmt: str,
    output: Path | None,
    summary: bool,
    previous_run: int | tuple[str, str] | None,
    thresholds: tuple[str, ...],
    gpu: str | None,
    te_version: str | None,
    url: str,
    token: str | None,
    as_json: bool,
) -> None:
    """The recommended precision policy, as JSON (stdout) or a ready-to-use config (TE YAML, Megatron, Hydra,
    torchao). RUN is an id or project/name; --threshold/--gpu/--te-version/--previous-run recompute it."""
    with _connect(url, token) as client:
        run_id = _run_id(client, run_ref)
        previous = _run_id(client, previous_run) if previous_run is not None else None
        overrides = _overrides(thresholds, gpu, te_version, previous)
        result = client.recommendation(run_id, format=fmt, overrides=overrides or None)
    text = json.dumps(result, indent=2) + "\n" if fmt == "json" else str(result)
    if output is not None:
        output.write_text(text)
        done = {"run_id": run_id, "format": fmt, "path": str(output)}
        return click.echo(json.dumps(done) if as_json else f"wrote the {fmt} policy of run {run_id} to {output}")
    if not isinstance(result, dict) or not summary:  # a dict exactly when fmt is json
        return click.echo(text, nl=False)
    click.echo("\n".join(gating.change_section(result)[2:]) + "rationale:")
    for line in result.get("rationale", []):
        click.echo(f"  - {line}")


@click.command()
@click.argument("run_ref", metavar="RUN", type=RUN_REF)
@click.option(
    "--fail-on",
    type=click.Choice(gating.FAIL_ON),
    default="critical",
    show_default=True,
    help="Fail when any finding is at least this severe.",
)
@click.option("--timeout", default=600.0, show_default=True, help="Seconds to wait for a run still ingesting.")
@click.option(
    "--summary-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Append the markdown to FILE (e.g. $GITHUB_STEP_SUMMARY).",
)
@_policy_options
@_client_options
def gate(
    run_ref: int | tuple[str, str],
    fail_on: str,
    timeout: float,
    summary_file: Path | None,
    thresholds: tuple[str, ...],
    gpu: str | None,
    te_version: str | None,
    url: str,
    token: str | None,
    as_json: bool,
) -> None:
    """Pass/fail a run for CI: exit 0 pass, 1 when a finding reaches --fail-on, 2 on usage/service errors.
    RUN is an id or project/name; --threshold applies to the analysis and the recommendation."""
    overrides = _overrides(thresholds, gpu, te_version)
    with _connect(url, token) as client:
        run_id = _run_id(client, run_ref)
        run = client.run(run_id)
        if run["status"] != "ready":
            run = client.wait(run_id, timeout=timeout)
        analysis_result = client.analysis(run_id, **overrides.get("thresholds", {}))
        rec = client.recommendation(run_id, overrides=overrides or None)
        result = gating.evaluate(run, analysis_result, rec, fail_on)
    markdown = gating.render_markdown(result)
    if summary_file is not None:
        with summary_file.open("a", encoding="utf-8") as handle:
            handle.write(markdown + "\n")
    click.echo(json.dumps(result.to_dict(), indent=2) if as_json else markdown, nl=as_json)
    if not result.passed:
        raise click.exceptions.Exit(1)


@click.command()
@click.argument("base", type=RUN_REF)
@click.argument("head", type=RUN_REF)
@_client_options
def compare(
    base: int | tuple[str, str], head: int | tuple[str, str], url: str, token: str | None, as_json: bool
) -> None:
    """How run HEAD differs from run BASE (ids or project/name): summary, findings that appeared or
    disappeared, precision changes."""
    with _connect(url, token) as client:
        result = client.compare(_run_id(client, base), _run_id(client, head))
    if as_json:
        return _echo_json(result)
    for side in ("base", "head"):
        run = result.get(side) or {}
        click.echo(f"{side}  run {run.get('id')} {run.get('name') or ''}".rstrip())
    click.echo("".join(f"- {line}\n" for line in result.get("summary", [])), nl=False)
    for key in ("findings_appeared", "findings_disappeared", "precision_changes"):
        rows = result.get(key) or []
        if rows:
            headers = list(dict.fromkeys(k for row in rows for k in row if k != "evidence"))
            click.echo(f"\n{key.replace('_', ' ')}:\n" + _table(headers, [[r.get(h) for h in headers] for r in rows]))
    for note in result.get("notes", []):
        click.echo(f"note: {note}")


@click.command()
@click.argument("run_ref", metavar="RUN", type=RUN_REF)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path), help="PNG file.")
@click.option("--tensor", help="gradient (default), activation or weight.")
@click.option("--stat", help="As logged, e.g. underflows% (default) or mxfp8_underflows%.")
@click.option("--rank", type=int, help="One rank (default: the max over ranks).")
@click.option("--dpi", type=int, help="Resolution (service default 150).")
@_client_options
def heatmap(
    run_ref: int | tuple[str, str],
    output: Path,
    tensor: str | None,
    stat: str | None,
    rank: int | None,
    dpi: int | None,
    url: str,
    token: str | None,
    as_json: bool,
) -> None:
    """Save the run's layers x iterations heatmap (gradient underflows% by default) as a PNG (RUN: id or
    project/name)."""
    with _connect(url, token) as client:
        run_id = _run_id(client, run_ref)
        client.heatmap(run_id, output, tensor=tensor, stat=stat, rank=rank, dpi=dpi)
    done = {"run_id": run_id, "path": str(output), "bytes": output.stat().st_size}
    click.echo(
        json.dumps(done) if as_json else f"wrote the heatmap of run {run_id} to {output} ({done['bytes']} bytes)"
    )


@click.command()
@click.argument("run_ref", metavar="RUN", type=RUN_REF)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@_client_options
def delete(run_ref: int | tuple[str, str], yes: bool, url: str, token: str | None, as_json: bool) -> None:
    """Delete a run, its metrics and its stored archive (RUN: an id or project/name; needs an admin token)."""
    with _connect(url, token) as client:
        run_id = _run_id(client, run_ref)
        if not yes:
            click.confirm(f"delete run {run_id} and all its data?", abort=True, err=True)
        client.delete(run_id)
    done = {"run_id": run_id, "deleted": True}
    click.echo(json.dumps(done) if as_json else f"deleted run {run_id}")


@click.command()
@click.argument("log_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--name", help="Run name.")
@click.option("--project", help="Project (default: 'default').")
@click.option("--tags", help="Comma-separated tags.")
@click.option("--metadata", callback=_metadata, help="JSON object or @file, as for upload.")
@click.option(
    "--interval",
    default=2.0,
    show_default=True,
    type=click.FloatRange(0.05, 3600),
    help="Seconds between two sends of the new bytes.",
)
@click.option("--pid", type=int, help="Finalize when this process (the training job) exits.")
@click.option("--idle-finish", type=click.FloatRange(0.1), help="Finalize after this many seconds without new bytes.")
@click.option(
    "--scalars",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Training scalars as JSON lines ({step, loss, grad_norm, ...}), sent with the logs.",
)
@click.option("--run", "run_id", type=int, help="Resume this live run (after a restart of watch).")
@_client_options
def watch(
    log_dir: Path,
    name: str | None,
    project: str | None,
    tags: str | None,
    metadata: dict[str, Any] | None,
    interval: float,
    pid: int | None,
    idle_finish: float | None,
    scalars: Path | None,
    run_id: int | None,
    url: str,
    token: str | None,
    as_json: bool,
) -> None:
    """Stream LOG_DIR's FP8 statistics to a live run while training writes them; finalize at the end.

    Ranks are picked up as their files appear; when the service is down the new bytes wait and are sent once it
    answers again. Without --pid or --idle-finish, stop with Ctrl-C (the run is finalized then).
    """
    from fp8_policy.client.live import LiveUploader
    from fp8_policy.client.live import watch as watch_loop

    with _connect(url, token) as client:
        uploader = LiveUploader(
            log_dir,
            name=name,
            project=project or "default",
            tags=[t for t in (tags or "").split(",") if t],
            metadata=metadata,
            interval=interval,
            scalars=scalars,
            run_id=run_id,
            client=client,
            on_event=None if as_json else (lambda e: click.echo(f"{e['severity']}: {e['message']}", err=True)),
        )
        try:
            run = watch_loop(uploader, pid=pid, idle_finish=idle_finish)
        except KeyboardInterrupt:
            run = uploader.finish()
        if run is None:
            raise PolicyError(
                uploader.stats.last_error or "the live run could not be finalized", error="FinalizeFailed"
            )
        if as_json:
            _echo_json(run)
        else:
            click.echo(
                f"run {run['id']} finalized ({uploader.stats.pieces} pieces, {uploader.stats.bytes_sent:,} "
                f"bytes, {len(uploader.stats.events)} early warnings); ingest: {run['status']}"
            )


@click.group()
def alert() -> None:
    """Webhook alerts for a project's live runs (admin token): add, list, remove, log."""


@alert.command("add")
@click.option("--project", required=True, help="Runs of this project raise the alert.")
@click.option("--webhook", required=True, help="http(s) URL (a Slack incoming webhook or any receiver).")
@click.option("--format", "format_", type=click.Choice(["slack", "json"]), default="slack", show_default=True)
@click.option("--events", help="Comma-separated event kinds (default: every kind), e.g. band_crossing,scalar_spike.")
@click.option(
    "--min-severity", type=click.Choice(["ok", "warning", "critical", "severe"]), default="warning", show_default=True
)
@click.option(
    "--cooldown",
    default=600,
    show_default=True,
    type=click.IntRange(0, 7 * 24 * 3600),
    help="Seconds before the same problem pages again.",
)
@_client_options
def alert_add(
    project: str,
    webhook: str,
    format_: str,
    events: str | None,
    min_severity: str,
    cooldown: int,
    url: str,
    token: str | None,
    as_json: bool,
) -> None:
    """Send PROJECT's early warnings to a webhook."""
    with _connect(url, token) as client:
        rule = client.add_alert_rule(
            project,
            webhook,
            format=format_,
            events=[e for e in (events or "").split(",") if e],
            min_severity=min_severity,
            cooldown_seconds=cooldown,
        )
    _echo_json(rule) if as_json else click.echo(f"alert rule {rule['id']} added for project {rule['project']}")


@alert.command("list")
@click.option("--project")
@_client_options
def alert_list(project: str | None, url: str, token: str | None, as_json: bool) -> None:
    """The alert rules."""
    with _connect(url, token) as client:
        rules = client.alert_rules(project)
    if as_json:
        _echo_json(rules)
        return
    click.echo(
        _table(
            ["id", "project", "format", "events", "min severity", "cooldown", "webhook"],
            [
                [
                    r["id"],
                    r["project"],
                    r["format"],
                    ",".join(r["events"]) or "all",
                    r["min_severity"],
                    r["cooldown_seconds"],
                    r["webhook"],
                ]
                for r in rules
            ],
        )
    )


@alert.command("remove")
@click.argument("rule_id", type=int)
@_client_options
def alert_remove(rule_id: int, url: str, token: str | None, as_json: bool) -> None:
    """Remove an alert rule (its past alerts stay in the log)."""
    with _connect(url, token) as client:
        client.remove_alert_rule(rule_id)
    _echo_json({"removed": rule_id}) if as_json else click.echo(f"alert rule {rule_id} removed")


@alert.command("log")
@click.option("--project")
@click.option("--run", "run_id", type=int)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000))
@_client_options
def alert_log(project: str | None, run_id: int | None, limit: int, url: str, token: str | None, as_json: bool) -> None:
    """Alerts raised, newest first."""
    with _connect(url, token) as client:
        entries = client.alert_log(project=project, run_id=run_id, limit=limit)
    if as_json:
        _echo_json(entries)
        return
    click.echo(
        _table(
            ["id", "status", "run", "kind", "severity", "message"],
            [
                [
                    e["id"],
                    e["status"],
                    e["run_id"],
                    e["event"].get("kind"),
                    e["event"].get("severity"),
                    e["event"].get("message"),
                ]
                for e in entries
            ],
        )
    )


COMMANDS = (upload, status, runs, analysis, recommend, gate, compare, heatmap, delete, watch, alert)


def register_client_commands(group: click.Group) -> click.Group:
    """Add the client commands to `group` (the `fp8-policy` console script's group in `service/cli.py`)."""
    for command in COMMANDS:
        group.add_command(command)
    return group


@click.group()
def cli() -> None:
    """fp8-policy client: upload FP8 debug logs, read the analysis, get and gate on the recommended policy."""


register_client_commands(cli)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
