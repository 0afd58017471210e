"""The run commands of the `fp8-policy` console script: upload, status, runs, edit, delete.

Belongs here: the commands that create, list, show, edit and remove runs, and the run summary they print.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from fp8_policy.client import trackers
from fp8_policy.client.cli.common import (
    RUN_REF,
    cell,
    client_options,
    connect,
    echo_json,
    echo_rows,
    parse_metadata,
    resolve_run,
)


def run_summary(run: dict[str, Any]) -> str:
    rows: list[list[Any]] = [
        ["run", f"{run['id']}  {run.get('name') or ''}".rstrip()],
        ["project", run.get("project")],
        ["status", run.get("status")],
        ["tags", run.get("tags") or "-"],
    ]
    if run.get("notes"):
        rows.append(["notes", run["notes"]])
    link = run.get("training_run")
    if isinstance(link, dict):
        rows.append(["training", f"{link.get('kind')} {link.get('url') or link.get('ref')}"])
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
    return "\n".join(f"{key:<11}{cell(value)}" for key, value in rows)


@click.command()
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--name", help="Run name (default: the file or folder name, less .tar.gz/.zip/.log).")
@click.option("--project", help="Project (the service's default when omitted).")
@click.option("--tags", help="Comma-separated tags, e.g. nightly,h100.")
@click.option("--metadata", callback=parse_metadata, help='JSON object or @file: {"hidden_size": 1280, "gpu": "h100"}.')
@click.option("--wait", "wait_", is_flag=True, help="Wait until the run is ready (exit 2 if ingest fails).")
@click.option(
    "--timeout",
    default=600.0,
    show_default=True,
    help="Seconds --wait waits: for the run, and before that for a service answering 503 with Retry-After "
    "(starting, or busy), whose upload it sends again after the pause asked for.",
)
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: when stderr is a terminal).")
@click.option(
    "--scalars",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Training scalars as JSON lines ({step, loss, grad_norm, lr, ...}) to pack with a log directory "
    "(default: DIR/scalars.jsonl when present); the run page draws them as curves.",
)
@click.option(
    "--mlflow-run-id",
    help="Once ready, log the verdict, gate result and rendered configs into this MLflow run and link the two "
    "(implies --wait; needs fp8-policy[mlflow]).",
)
@click.option(
    "--mlflow-tracking-uri",
    envvar="MLFLOW_TRACKING_URI",
    help="The MLflow tracking server of --mlflow-run-id (default: $MLFLOW_TRACKING_URI).",
)
@click.option(
    "--wandb-run",
    metavar="ENTITY/PROJECT/RUN_ID",
    help="As --mlflow-run-id, into this Weights & Biases run (needs fp8-policy[wandb]; WANDB_MODE=offline works).",
)
@client_options
def upload(
    path: Path,
    name: str | None,
    project: str | None,
    tags: str | None,
    metadata: dict[str, Any] | None,
    wait_: bool,
    timeout: float,
    progress: bool | None,
    scalars: Path | None,
    mlflow_run_id: str | None,
    mlflow_tracking_uri: str | None,
    wandb_run: str | None,
    url: str,
    token: str | None,
    as_json: bool,
) -> None:
    """Upload an fp8_log_dir (only its nvdlfw_inspect logs and scalars.jsonl, packed to tar.gz) or one
    archive/log file."""
    if scalars is not None and not path.is_dir():
        raise click.UsageError("--scalars goes with a log directory; put scalars.jsonl into your archive instead")
    if mlflow_run_id and wandb_run:
        raise click.UsageError("--mlflow-run-id and --wandb-run: one tracker run per upload")
    wait_ = wait_ or bool(mlflow_run_id or wandb_run)  # the verdict needs the ready run
    with connect(url, token) as client:
        run = client.upload(
            path,
            name=name,
            project=project,
            tags=tags,
            metadata=metadata,
            progress=progress,
            scalars=scalars,
            retry_for=timeout if wait_ else 0.0,
        )
        duplicate_of = run.get("duplicate_of")
        if duplicate_of:
            click.echo(duplicate_note(duplicate_of, name), err=True)
        if wait_:
            try:
                run = {**client.wait(run["id"], timeout=timeout), "duplicate_of": duplicate_of}
            except KeyboardInterrupt:  # the bytes are stored: say which run they became (click prints "Aborted!")
                click.echo(
                    f"\nstopped waiting: run {run['id']} ({run.get('project')}/{run.get('name')}) was uploaded and "
                    f"is still analysed by the service; `fp8-policy status {run['id']}` follows it",
                    err=True,
                )
                raise SystemExit(130) from None
        if mlflow_run_id or wandb_run:
            handed = trackers.hand_off(
                client,
                run["id"],
                mlflow_run_id=mlflow_run_id,
                mlflow_tracking_uri=mlflow_tracking_uri,
                wandb_run=wandb_run,
            )
            run = {**run, "training_run": handed.link}
            where = handed.link.get("url") or handed.link["ref"]
            click.echo(f"logged the verdict, gate result and {len(handed.configs)} configs into {where}", err=True)
    if as_json:
        return echo_json(run)
    click.echo(run_summary(run))


def duplicate_note(duplicate_of: dict[str, Any], asked_name: str | None) -> str:
    """One line on stderr when the service already held the uploaded bytes (`duplicate_of`: its id and name)."""
    known = f"run {duplicate_of['id']}" + (f" ({duplicate_of['name']!r})" if duplicate_of.get("name") else "")
    unapplied = (
        f"; the name {asked_name!r} was not applied" if asked_name and asked_name != duplicate_of.get("name") else ""
    )
    return f"note: these bytes were already uploaded to this project as {known}: answering with that run{unapplied}"


@click.command()
@click.argument("run_ref", metavar="RUN", type=RUN_REF)
@client_options
def status(run_ref: int | tuple[str, str], url: str, token: str | None, as_json: bool) -> None:
    """A run's status and ingest figures (RUN: an id or project/name)."""
    with connect(url, token) as client:
        run = client.run(resolve_run(client, run_ref))
    if as_json:
        return echo_json(run)
    click.echo(run_summary(run))


@click.command()
@click.option("--project")
@click.option("--status", "status_", type=click.Choice(["queued", "processing", "ready", "failed", "live"]))
@click.option("--tag")
@click.option("--gpu", help='Only runs whose metadata names this GPU ("H100" finds "NVIDIA H100 80GB HBM3").')
@click.option("--recipe", help='Only runs whose metadata names this recipe ("mxfp8", "DelayedScaling", ...).')
@click.option("--te-version", help='Only runs on this TE version or one under it ("2.8" finds 2.8.0+cu128).')
@click.option("--commit", "git_commit", help="Only runs whose metadata's git commit starts with this.")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 200))
@client_options
def runs(
    project: str | None,
    status_: str | None,
    tag: str | None,
    gpu: str | None,
    recipe: str | None,
    te_version: str | None,
    git_commit: str | None,
    limit: int,
    url: str,
    token: str | None,
    as_json: bool,
) -> None:
    """The newest runs (one page)."""
    facets = {"gpu": gpu, "recipe": recipe, "te_version": te_version, "git_commit": git_commit}
    with connect(url, token) as client:
        page = client.runs(project=project, status=status_, tag=tag, limit=limit, **facets)
    if as_json:
        return echo_json(page)
    rows = [
        [
            r["id"],
            r.get("name"),
            r.get("project"),
            r.get("status"),
            verdict(r),
            r.get("layer_count"),
            r.get("created_at"),
        ]
        for r in page["items"]
    ]
    none = (
        "no runs match these filters"
        if project or status_ or tag or any(facets.values())
        else "no runs yet: `fp8-policy upload LOG_DIR` sends one"
    )
    echo_rows(["id", "name", "project", "status", "verdict", "layers", "created"], rows, none)


def verdict(run: dict[str, Any]) -> str:
    """The runs list's verdict, as the dashboard shows it: severity and leading pattern, layers to BF16, the
    precision mix; "training" for a live run, "-" while there is none."""
    summary = run.get("summary")
    if run.get("status") == "live":
        return "training"
    if not isinstance(summary, dict):
        return "-"
    pattern = summary.get("pattern")
    text = str(summary.get("severity")) + (f" {pattern}" if pattern and pattern != "healthy" else "")
    text += f", {summary.get('to_bf16', 0)} to BF16"
    mix = summary.get("precision_mix") or {}
    if mix:
        text += ", " + " ".join(f"{n} {p}" for p, n in mix.items())
    return text


@click.command()
@click.argument("run_ref", metavar="RUN", type=RUN_REF)
@click.option("--notes", help='The run\'s notes (a description); "" clears them.')
@click.option("--tag", "tags", multiple=True, help="A tag; repeat it. The tags given replace the run's tags.")
@click.option("--no-tags", is_flag=True, help="Remove every tag of the run.")
@client_options
def edit(
    run_ref: int | tuple[str, str],
    notes: str | None,
    tags: tuple[str, ...],
    no_tags: bool,
    url: str,
    token: str | None,
    as_json: bool,
) -> None:
    """Edit a run's notes and tags (RUN: an id or project/name; needs an upload or admin token)."""
    if tags and no_tags:
        raise click.UsageError("--tag and --no-tags contradict each other")
    if notes is None and not tags and not no_tags:
        raise click.UsageError("nothing to change: give --notes, --tag or --no-tags")
    with connect(url, token) as client:
        run_id = resolve_run(client, run_ref)
        new_tags = [] if no_tags else (list(tags) or None)  # None: the tags are kept
        if notes is None:
            run = client.update_run(run_id, tags=new_tags)
        else:
            run = client.update_run(run_id, notes=notes, tags=new_tags)
    if as_json:
        return echo_json(run)
    click.echo(run_summary(run))


@click.command()
@click.argument("run_ref", metavar="RUN", type=RUN_REF)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@client_options
def delete(run_ref: int | tuple[str, str], yes: bool, url: str, token: str | None, as_json: bool) -> None:
    """Delete a run, its metrics and its stored archive (RUN: an id or project/name; needs an admin token)."""
    with connect(url, token) as client:
        run_id = resolve_run(client, run_ref)
        if not yes:
            click.confirm(f"delete run {run_id} and all its data?", abort=True, err=True)
        client.delete(run_id)
    done = {"run_id": run_id, "deleted": True}
    click.echo(json.dumps(done) if as_json else f"deleted run {run_id}")
