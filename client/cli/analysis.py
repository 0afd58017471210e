"""The analysis commands of the `fp8-policy` console script: analysis, recommend, gate, compare, heatmap.

Belongs here: the commands that read a ready run's findings and policy, the CI gate and the run comparison (2 runs
in detail, 3-8 side by side).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from fp8_policy.client import gate as gating
from fp8_policy.client.cli.common import (
    MAX_CELL,
    RUN_REF,
    PolicySettings,
    client_options,
    connect,
    echo_json,
    policy_options,
    resolve_run,
    table,
)
from fp8_policy.client.formats import FORMATS

MAX_PP_STAGE = 2**16  # the service's bound on `pp_stage` (service/limits.py)

WIDE_COLUMNS = tuple(f"{t}_underflow_{s}" for t in ("gradient", "activation", "weight") for s in ("max", "last"))


@click.command()
@click.argument("run_ref", metavar="RUN", type=RUN_REF)
@click.option("--wide", is_flag=True, help="Every layer with its underflow columns, cells not shortened.")
@client_options
def analysis(run_ref: int | tuple[str, str], wide: bool, url: str, token: str | None, as_json: bool) -> None:
    """Findings (pattern, severity, layers) and the worst layers of a ready run (RUN: an id or project/name)."""
    with connect(url, token) as client:
        result = client.analysis(resolve_run(client, run_ref))
    if as_json:
        return echo_json(result)
    width = None if wide else MAX_CELL
    findings = [
        [f.get("severity"), f.get("label") or f.get("pattern"), f.get("layers"), f.get("summary")]
        for f in result["findings"]
    ]
    click.echo(table(["severity", "pattern", "layers", "summary"], findings, width))
    if wide:
        columns = ["name", "status", "worst_signal", "worst_level", *WIDE_COLUMNS, "patterns"]
        rows = [  # the verdict, as the dashboard shows it: n/a for a layer nothing of which was assessed
            [row.get("name"), row.get("status"), gating.layer_verdict(row), *(row.get(c) for c in columns[2:])]
            for row in result.get("layers", [])
        ]
        click.echo(
            "\n"
            + table(
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
            [r.get("name"), gating.layer_verdict(r), r.get("worst_signal"), r.get("worst_level"), r.get("patterns")]
            for r in worst
        ]
        click.echo("\n" + table(["layer", "severity", "worst signal", "level %", "patterns"], rows))
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
@click.option(
    "--pp-stage",
    type=click.IntRange(0, MAX_PP_STAGE),
    help="Pipeline stage K's te-yaml / te-monitor file: a job whose stages name their blocks locally has one per stage.",
)
@click.option(
    "--phase", type=click.IntRange(min=0), help="Render phase K of the recommendation's schedule (restart at its step)."
)
@click.option("--lr-decay-start", type=click.IntRange(min=1), help="The step the learning rate starts to decay.")
@click.option("--target", help="speedup:<x> or risk:<x>: re-solve for that budget on the run's frontier.")
@policy_options
@client_options
def recommend(
    run_ref: int | tuple[str, str],
    fmt: str,
    output: Path | None,
    summary: bool,
    previous_run: int | tuple[str, str] | None,
    pp_stage: int | None,
    phase: int | None,
    lr_decay_start: int | None,
    target: str | None,
    policy: PolicySettings,
    url: str,
    token: str | None,
    as_json: bool,
) -> None:
    """The recommended precision policy, as JSON (stdout) or a ready-to-use config (TE YAML, Megatron, Hydra,
    torchao). RUN is an id or project/name; --threshold/--gpu/--te-version/--previous-run recompute it; --target
    re-solves it for a budget on the stored frontier (which layers changed: the JSON's `target`)."""
    with connect(url, token) as client:
        run_id = resolve_run(client, run_ref)
        previous = resolve_run(client, previous_run) if previous_run is not None else None
        overrides = {
            **policy.overrides(previous),
            **({"lr_decay_start": lr_decay_start} if lr_decay_start is not None else {}),
            **({"target": target} if target else {}),
        }
        result = client.recommendation(run_id, format=fmt, overrides=overrides or None, pp_stage=pp_stage, phase=phase)
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
@policy_options
@client_options
def gate(
    run_ref: int | tuple[str, str],
    fail_on: str,
    timeout: float,
    summary_file: Path | None,
    policy: PolicySettings,
    url: str,
    token: str | None,
    as_json: bool,
) -> None:
    """Pass/fail a run for CI: exit 0 pass, 1 when a finding reaches --fail-on, 2 on usage/service errors.
    RUN is an id or project/name; --threshold applies to the analysis and the recommendation."""
    overrides = policy.overrides()
    with connect(url, token) as client:
        run_id = resolve_run(client, run_ref)
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
@click.argument("run_refs", metavar="RUN RUN [RUN...]", nargs=-1, required=True, type=RUN_REF)
@client_options
def compare(run_refs: tuple[int | tuple[str, str], ...], url: str, token: str | None, as_json: bool) -> None:
    """Compare 2-8 runs (ids or project/name). Two: how the second (head) differs from the first (base): summary,
    findings that appeared or disappeared, precision changes. Three to eight: each run's verdict and recommendation
    side by side, rows where the runs differ marked with *."""
    if not 2 <= len(run_refs) <= 8:
        raise click.UsageError(f"compare takes 2-8 runs, got {len(run_refs)}")
    with connect(url, token) as client:
        ids = [resolve_run(client, ref) for ref in run_refs]
        result = client.compare(*ids) if len(ids) == 2 else client.compare_runs(ids)
    if as_json:
        return echo_json(result)
    if len(ids) > 2:
        return click.echo(runs_table(result))
    for side in ("base", "head"):
        run = result.get(side) or {}
        click.echo(f"{side}  run {run.get('id')} {run.get('name') or ''}".rstrip())
    click.echo("".join(f"- {line}\n" for line in result.get("summary", [])), nl=False)
    for key in ("findings_appeared", "findings_disappeared", "precision_changes"):
        rows = result.get(key) or []
        if rows:
            headers = list(dict.fromkeys(k for row in rows for k in row if k != "evidence"))
            click.echo(f"\n{key.replace('_', ' ')}:\n" + table(headers, [[r.get(h) for h in headers] for r in rows]))
    for note in result.get("notes", []):
        click.echo(f"note: {note}")


_SHOWN: dict[str, Any] = {  # GET /compare/runs table row -> how one run's value is printed
    "severity": lambda v: v,
    "findings": lambda v: ", ".join(f["label"] for f in v) or "healthy",
    "trained_recipe": lambda v: v or "-",
    "ran_bf16": lambda v: "-" if v is None else len(v),
    "recipe": lambda v: v["name"] if v else "-",
    "to_bf16": lambda v: "-" if v is None else len(v),
    "gemm_overrides": lambda v: "-" if v is None else len(v),
    "ladder": lambda v: ", ".join(f"{n} {p}" for p, n in sorted(v.items(), key=lambda x: -x[1])) if v else "-",
    "bf16_gemm_share": lambda v: "-" if v is None else f"{v:.1%}",
    "gemm_slowdown_vs_all_fp8_pct": lambda v: "-" if v is None else f"{v:.1f}%",
    "gemm_speedup_vs_all_bf16": lambda v: "-" if v is None else f"{v:.2f}x",
    "confidence": lambda v: "-" if v is None else f"{v:.0%}",
}


def runs_table(result: dict[str, Any]) -> str:
    """GET /compare/runs as text: the runs (the first is the reference), the summary, one column per run."""
    runs = result.get("runs") or []
    names = ", ".join(f"run {r['id']} {r.get('name') or ''}".rstrip() for r in runs)
    lines = [f"compare  {names} (first: the reference)", *(f"- {s}" for s in result.get("summary") or [])]
    rows = [
        [row["label"], *(_SHOWN.get(row["key"], str)(v) for v in row["values"]), "*" if row["differs"] else ""]
        for row in result.get("table") or []
    ]
    lines += ["", table(["", *(f"run {r['id']}" for r in runs), "differs"], rows)]
    layers = result.get("layers") or []
    differing = sum(1 for row in layers if row["differs"])
    lines.append(f"\nlayers: {result.get('common_layers')} in every run, {differing} of {len(layers)} differ")
    return "\n".join(lines)


@click.command()
@click.argument("run_ref", metavar="RUN", type=RUN_REF)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path), help="PNG file.")
@click.option("--tensor", help="gradient (default), activation or weight.")
@click.option("--stat", help="As logged, e.g. underflows% (default) or mxfp8_underflows%.")
@click.option("--rank", type=int, help="One rank (default: the max over ranks).")
@click.option("--dpi", type=int, help="Resolution (service default 150).")
@client_options
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
    with connect(url, token) as client:
        run_id = resolve_run(client, run_ref)
        client.heatmap(run_id, output, tensor=tensor, stat=stat, rank=rank, dpi=dpi)
    done = {"run_id": run_id, "path": str(output), "bytes": output.stat().st_size}
    click.echo(
        json.dumps(done) if as_json else f"wrote the heatmap of run {run_id} to {output} ({done['bytes']} bytes)"
    )
