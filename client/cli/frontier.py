"""The `frontier` and `verify` commands of the `fp8-policy` console script (client/cli/__init__.py adds them).

`frontier RUN -o frontier.png` saves the speed/risk chart (without -o: the frontier, the rules and the chosen point
as a table); `verify RUN --spec FILE` trains the recommendation's arms (client/experiment/: bf16, all-low, the rule
baselines, recommended, and `--target` / `--frontier-point` arms) from the same state, posts the experiment and
prints the verdict; `--replicates N` trains every arm N times (replicate r under seed SEED + r; the data order follows
the seed when the spec's `batches` takes a `seed` keyword, client/experiment/replicates.py) and the service judges
the recommendation paired over the replicates, against their one-sided 95 % noise bound, which is printed.
`verify` needs the `[torch]` extra (imported only when it runs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from fp8_policy.client.cli.common import RUN_REF, client_options, connect, resolve_run


def _table(frontier: dict[str, Any]) -> list[str]:
    lines = [f"{'point':>6} {'speedup':>8} {'risk (' + frontier['risk_unit'] + ')':>26}  changed"]
    points = frontier["points"]
    step = max(1, len(points) // 20)
    for index in sorted({*range(0, len(points), step), len(points) - 1} if points else set()):
        point = points[index]
        moved = ", ".join(f"{c['layer']} {c['from']}->{c['to']}" for c in point["layers_changed"])
        lines.append(f"{index:>6} {point['speedup']:>8.3f} {point['predicted_risk']:>26.6g}  {moved}")
    lines.append("")
    for base in frontier["baselines"]:
        risk = "-" if base["predicted_risk"] is None else f"{base['predicted_risk']:.6g}"
        lines.append(
            f"rule {base['name']:14} speedup {base['speedup']:.3f}  risk {risk}  ({len(base['bf16_layers'])} BF16)"
        )
    chosen = frontier["chosen"]
    risk = "-" if chosen["predicted_risk"] is None else f"{chosen['predicted_risk']:.6g}"
    lines.append(f"chosen ({chosen['source']}): speedup {chosen['speedup']:.3f}  risk {risk}")
    if not frontier["available"]:
        lines.append(f"no frontier: {frontier.get('reason')}")
    return lines


@click.command()
@click.argument("run_ref", metavar="RUN", type=RUN_REF)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Save the chart (PNG) here.")
@click.option("--target", help="speedup:<x> or risk:<x>: the point chosen for that budget.")
@client_options
def frontier(
    run_ref: int | tuple[str, str], output: Path | None, target: str | None, url: str, token: str | None, as_json: bool
) -> None:
    """The run's speed/risk frontier with the rule recipes (RUN: id or project/name): a PNG with -o, else a table."""
    with connect(url, token) as client:
        run_id = resolve_run(client, run_ref)
        if output is not None:
            client.frontier_png(run_id, output, target)
            done = {"run_id": run_id, "path": str(output), "bytes": output.stat().st_size}
            click.echo(json.dumps(done) if as_json else f"wrote the frontier of run {run_id} to {output}")
            return
        answer = client.recommendation_for_target(run_id, target) if target else client.recommendation(run_id)
    if as_json:
        click.echo(json.dumps(answer.get("frontier"), indent=2))
        return
    click.echo("\n".join(_table(answer["frontier"])))


@click.command()
@click.argument("run_ref", metavar="RUN", type=RUN_REF)
@click.option("--spec", "spec_path", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Python file defining model(), loss(model, batch), batches(), heldout().")  # fmt: skip
@click.option("--steps", type=int, help="Steps per arm (default: the spec's STEPS, else 100).")
@click.option("--seed", type=int, help="Seed of every arm (default: the spec's SEED, else 0).")
@click.option("--target", "targets", multiple=True, help="Also train the recommendation for this budget.")
@click.option("--frontier-point", "points", type=int, multiple=True, help="Also train this frontier point.")
@click.option("--replicates", type=click.IntRange(1, 32), default=1, show_default=True,
              help="Train every arm this many times (seeds SEED..SEED+N-1) for a paired, noise-aware verdict.")  # fmt: skip
@click.option("--backend", type=click.Choice(["emulated", "te"]), default="emulated", show_default=True)
@click.option("--name", help="The experiment's name (default: the spec's file name and seed).")
@click.option("--no-post", is_flag=True, help="Train and print, but do not post the experiment.")
@client_options
def verify(
    run_ref: int | tuple[str, str],
    spec_path: Path,
    steps: int | None,
    seed: int | None,
    targets: tuple[str, ...],
    points: tuple[int, ...],
    replicates: int,
    backend: str,
    name: str | None,
    no_post: bool,
    url: str,
    token: str | None,
    as_json: bool,
) -> None:
    """Train the recommendation's arms from the same state and post the experiment (RUN: id or project/name)."""
    from fp8_policy.client.experiment.arms import arms_from_recommendation, experiment_body
    from fp8_policy.client.experiment.replicates import run_replicates
    from fp8_policy.client.experiment.runner import apply_emulated, run_arms, te_apply
    from fp8_policy.client.experiment.spec import load_spec

    spec = load_spec(spec_path)
    steps = steps or int(spec.names.get("STEPS", 100))
    seed = seed if seed is not None else int(spec.names.get("SEED", 0))
    with connect(url, token) as client:
        run_id = resolve_run(client, run_ref)
        policy = client.recommendation(run_id)
        extra = [(f"target {t}", client.recommendation_for_target(run_id, t)) for t in targets]
        arms = arms_from_recommendation(policy, frontier_points=points, extra=extra)
        apply = te_apply(policy) if backend == "te" else apply_emulated
        say = (lambda text: None) if as_json else (lambda text: click.echo(text, err=True))
        kwargs = {"steps": steps, "seed": seed, "apply": apply, "progress": say, **spec.run_kwargs()}
        if replicates > 1:
            measured = run_replicates(arms, replicates=replicates, **kwargs)
            default_name = f"{spec_path.name} seeds {seed}-{seed + replicates - 1}"
        else:
            measured = run_arms(arms, **kwargs)
            default_name = f"{spec_path.name} seed {seed}"
        body = experiment_body(measured, name=name or default_name, run_id=run_id, seed=seed)
        result = body if no_post else client.post_experiment(run_id, body)
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    for arm in result["arms"]:
        gap, se = arm.get("heldout_gap"), arm.get("gap_se")
        click.echo(
            f"{arm['name']:24} {arm['kind']:12} held-out {arm['heldout_loss']}"
            + (f"  gap {gap:+.4f}" if gap is not None else "")
            + (f" ±{se:.4f} (SE over {len(arm.get('heldout_losses') or ())} replicates)" if se is not None else "")
        )
    verdict = result.get("verification")
    if verdict:
        click.echo(f"verification: {verdict['status']} - {verdict['detail']}")
        if (verdict.get("replicates") or 1) > 1 and verdict.get("noise_bound") is not None:
            click.echo(
                f"noise: {verdict['replicates']} replicates, one-sided 95 % bound ±{verdict['noise_bound']:.4f} nats"
                " on the recommended arm's mean gap"
                + (
                    f" (SE {verdict['recommended_gap_se']:.4f})"
                    if verdict.get("recommended_gap_se") is not None
                    else ""
                )
            )
        if verdict.get("next_step"):
            click.echo(f"next step: {verdict['next_step']['text']}")
