"""The live-run commands of the `fp8-policy` console script: watch (stream a training's statistics) and the
`alert` group (webhook rules for a project's live runs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from fp8_policy.client.cli.common import client_options, connect, echo_json, echo_rows, parse_metadata
from fp8_policy.client.errors import PolicyError


@click.command()
@click.argument("log_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--name", help="Run name.")
@click.option("--project", help="Project (default: 'default').")
@click.option("--tags", help="Comma-separated tags.")
@click.option("--metadata", callback=parse_metadata, help="JSON object or @file, as for upload.")
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
@client_options
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

    with connect(url, token) as client:
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
            echo_json(run)
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
@client_options
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
    with connect(url, token) as client:
        rule = client.add_alert_rule(
            project,
            webhook,
            format=format_,
            events=[e for e in (events or "").split(",") if e],
            min_severity=min_severity,
            cooldown_seconds=cooldown,
        )
    echo_json(rule) if as_json else click.echo(f"alert rule {rule['id']} added for project {rule['project']}")


@alert.command("list")
@click.option("--project")
@client_options
def alert_list(project: str | None, url: str, token: str | None, as_json: bool) -> None:
    """The alert rules."""
    with connect(url, token) as client:
        rules = client.alert_rules(project)
    if as_json:
        echo_json(rules)
        return
    echo_rows(
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
        "no alert rules" + (f" for project {project}" if project else ""),
    )


@alert.command("remove")
@click.argument("rule_id", type=int)
@client_options
def alert_remove(rule_id: int, url: str, token: str | None, as_json: bool) -> None:
    """Remove an alert rule (its past alerts stay in the log)."""
    with connect(url, token) as client:
        client.remove_alert_rule(rule_id)
    echo_json({"removed": rule_id}) if as_json else click.echo(f"alert rule {rule_id} removed")


@alert.command("log")
@click.option("--project")
@click.option("--run", "run_id", type=int)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000))
@client_options
def alert_log(project: str | None, run_id: int | None, limit: int, url: str, token: str | None, as_json: bool) -> None:
    """Alerts raised, newest first."""
    with connect(url, token) as client:
        entries = client.alert_log(project=project, run_id=run_id, limit=limit)
    if as_json:
        echo_json(entries)
        return
    echo_rows(
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
        "no alerts raised"
        + (f" for run {run_id}" if run_id is not None else "")
        + (f" in project {project}" if project else ""),
    )
