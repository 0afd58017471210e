"""`fp8-policy configs`: the rendered configs kept with a run (versioned, each with the policy version and options
of the recommendation it came from): keep some, list them, fetch one byte for byte as it was handed to training.
The service does the rendering and the storing (client/config_methods.py); this module only prints."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from fp8_policy.client.cli.common import (
    RUN_REF,
    PolicySettings,
    client_options,
    connect,
    echo_json,
    echo_rows,
    policy_options,
    resolve_run,
)
from fp8_policy.client.formats import FORMATS

KEEPABLE = FORMATS  # json first, then every rendered format


@click.command()
@click.argument("run_ref", metavar="RUN", type=RUN_REF)
@click.option(
    "--keep",
    "keep",
    multiple=True,
    type=click.Choice(KEEPABLE),
    help="Render the recommendation in this format and keep the file with the run (repeat it; an upload token).",
)
@click.option("--pp-stage", type=click.IntRange(min=0), help="With --keep: pipeline stage K's te-yaml / te-monitor.")
@click.option("--get", "get_id", type=click.IntRange(min=1), help="Print (or write with -o) the kept config ID.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="With --get: write to FILE.")
@click.option("--format", "only", type=click.Choice(KEEPABLE), help="List only this format's versions.")
@policy_options
@client_options
def configs(
    run_ref: int | tuple[str, str],
    keep: tuple[str, ...],
    pp_stage: int | None,
    get_id: int | None,
    output: Path | None,
    only: str | None,
    policy: PolicySettings,
    url: str,
    token: str | None,
    as_json: bool,
) -> None:
    """The rendered configs kept with a run (RUN: an id or project/name): list them, keep new ones (--keep
    te-yaml --keep megatron; --threshold/--gpu/--te-version as for `recommend`), or fetch one (--get ID)."""
    if get_id is not None and keep:
        raise click.UsageError("--get and --keep: one at a time")
    if output is not None and get_id is None:
        raise click.UsageError("-o/--output goes with --get")
    with connect(url, token) as client:
        run_id = resolve_run(client, run_ref)
        if get_id is not None:
            if output is not None:
                client.download_config(run_id, get_id, output)
                return click.echo(f"wrote config {get_id} of run {run_id} to {output}", err=True)
            sys.stdout.buffer.write(client.config_content(run_id, get_id))
            return None
        if keep:
            overrides = policy.overrides()
            items = client.keep_configs(run_id, keep, overrides=overrides, pp_stage=pp_stage)
        else:
            items = client.configs(run_id, format=only)
    if as_json:
        return echo_json(items)
    echo_rows(
        ["id", "format", "version", "policy", "sha256", "created", "file"] + (["new"] if keep else []),
        [_row(item, keep=bool(keep)) for item in items],
        f"run {run_id} keeps no configs yet: `fp8-policy configs {run_id} --keep te-yaml` keeps one",
    )


def _row(item: dict[str, Any], *, keep: bool) -> list[Any]:
    row = [
        item["id"],
        item["format"],
        item["version"],
        item["policy_version"],
        str(item["sha256"])[:12],
        item["created_at"],
        item["filename"],
    ]
    return row + (["yes" if item.get("new") else "no (same file)"] if keep else [])
