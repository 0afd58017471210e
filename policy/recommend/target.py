"""A budget for the recommendation: `speedup:<x>` or `risk:<x>`, re-solved on the frontier of a recommendation
already computed (recommend/frontier.py), without reading the run again.

* `speedup:<x>` (1 <= x <= 10, GEMM-time speedup over all-BF16): the frontier point with the least predicted risk
  whose speedup is at least x; the fastest point when none reaches x (`met: false`).
* `risk:<x>` (0 <= x <= 1e6 nats per step): the fastest frontier point whose predicted risk is at most x; the
  all-BF16 point when none is that safe (it has risk 0, so a valid budget is always met).
The chosen point's rungs replace the ladder's for the layers it changes (their evidence says so); the skip list is
the point's BF16 layers (layers that ran in BF16 stay as recommended), GEMM overrides stay on layers the target
leaves at their rung; cost, Megatron section and every rendered format follow (one decision). `target` in the JSON
says which layers changed and the speedup and risk as applied (GEMM overrides included).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from fp8_policy.policy.analysis.layout import LayerLevels, LayerStatus, Layout
from fp8_policy.policy.recommend.cost import answer_cost, ladder_view
from fp8_policy.policy.recommend.frontier import Frontier, _recommended_risk, _risk
from fp8_policy.policy.recommend.headline import decision_headline
from fp8_policy.policy.recommend.megatron import megatron_section
from fp8_policy.policy.recommend.options import ModelDims
from fp8_policy.policy.recommend.runs_at import applied_rungs, counted_rungs
from fp8_policy.policy.recommend.skiplist import SkipPlan
from fp8_policy.policy.render import megatron_pipeline
from fp8_policy.policy.render.megatron import staged_globs
from fp8_policy.policy.sensitivity import Sensitivity
from fp8_policy.policy.thresholds import Severity

R = TypeVar("R")  # recommend.Recommendation (not imported: the package imports this module)
MAX_TARGET_CHARS = 64
BOUNDS = {"speedup": (1.0, 10.0), "risk": (0.0, 1e6)}
_TARGET = re.compile(r"^(speedup|risk):([0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)$")


class TargetError(ValueError):
    """A target that is not `speedup:<x>` / `risk:<x>` within bounds."""


class NoFrontier(ValueError):
    """The recommendation has no frontier to re-solve on (no loss-sensitivity statistics)."""


@dataclass(frozen=True, slots=True)
class Target:
    kind: str  # speedup | risk
    value: float
    text: str


def parse_target(text: object) -> Target:
    if not isinstance(text, str) or len(text) > MAX_TARGET_CHARS:
        raise TargetError(f"target must be a string of at most {MAX_TARGET_CHARS} characters")
    match = _TARGET.match(text.strip())
    if match is None:
        raise TargetError(f"target must be speedup:<x> or risk:<x> (a plain decimal number), got {text!r}")
    kind, value = match[1], float(match[2])
    low, high = BOUNDS[kind]
    if not (math.isfinite(value) and low <= value <= high):
        raise TargetError(f"target {kind} must be between {low:g} and {high:g}, got {value:g}")
    return Target(kind, value, f"{kind}:{match[2]}")


@dataclass(frozen=True)
class RetargetContext:
    """What re-solving needs besides the recommendation: small records only (no series arrays)."""

    layout: Layout  # levels without their series summaries
    plan: SkipPlan
    dims: ModelDims
    capability: float | None
    current: str
    table: Sensitivity
    as_logged: str  # the recipe the run trained in (`bf16`: high precision), for the cost against the run as logged


def compact_layout(layout: Layout) -> Layout:
    levels = {name: LayerLevels(lv.info, lv.status, {}, Severity.OK, lv.failing) for name, lv in layout.levels.items()}
    return Layout(levels, list(layout.blocks), dict(layout.block_status), layout.index_base, layout.edge)


def choose(frontier: Frontier, target: Target) -> tuple[int, bool]:
    """(index of the chosen point, whether it meets the target); points run from all-BF16 to all-cheapest."""
    points = frontier.points
    if target.kind == "speedup":
        reaching = [i for i, p in enumerate(points) if p.speedup >= target.value]
        return (reaching[0], True) if reaching else (len(points) - 1, False)
    safe = [i for i, p in enumerate(points) if p.risk <= target.value]
    return (safe[-1], True) if safe else (0, False)


def retarget(rec: R, context: RetargetContext, target: Target) -> R:
    """`rec` (a `Recommendation`) re-solved for `target` on its frontier (module docstring)."""
    return _retarget(rec, context, target)  # type: ignore[no-any-return]  # a Recommendation in, one out


def _retarget(rec: Any, context: RetargetContext, target: Target) -> Any:
    frontier: Frontier | None = rec.frontier
    if frontier is None or not frontier.points or rec.ladder is None:
        raise NoFrontier(
            "this run has no loss-sensitivity statistics to trade speed against risk: log them with "
            "fp8_policy.collect (sensitivity=[...]) or the LogQuantizationSensitivity TE feature"
        )
    index, met = choose(frontier, target)
    solved = _solve(rec, context, frontier, index, target.text)
    while (
        target.kind == "speedup" and met and solved.speedup < target.value - 1e-9 and index + 1 < len(frontier.points)
    ):
        index += 1  # the GEMM overrides kept on unchanged layers cost a little: the next point reaches the budget
        solved = _solve(rec, context, frontier, index, target.text)
    point, changed, rungs, overrides, lcost = solved.point, solved.changed, solved.rungs, solved.overrides, solved.lcost
    plan, recipe, applied_speedup, applied_risk = solved.plan, rec.decision.recipe, solved.speedup, solved.risk
    info: dict[str, Any] = {
        "spec": target.text,
        "kind": target.kind,
        "value": target.value,
        "met": _met(target, applied_speedup, applied_risk) if met else False,
        "frontier_point": index,
        "point_speedup": round(point.speedup, 4),
        "point_predicted_risk": _risk(point.risk),
        "speedup": round(applied_speedup, 4),
        "predicted_risk": _risk(applied_risk),
        "layers_changed": [{"layer": layer, "from": old, "to": new} for layer, old, new in changed],
    }
    line = (
        f"Target {target.text}: frontier point {index} (GEMM speedup {applied_speedup:.3f}x over all-BF16, "
        f"predicted risk {_risk(applied_risk)} nats/step); {len(changed)} layer(s) changed from the recommendation"
        + ("" if info["met"] else "; the target is not reachable on this run's frontier: the closest point is shown")
        + "."
    )
    decision = replace(rec.decision, skip_layers=plan.skip_layers, gemm_overrides=overrides, layer_precisions=rungs)
    te_version = rec.decision.te_version
    megatron = megatron_section(context.layout, plan, recipe, rungs, te_version)
    megatron = megatron_pipeline.annotate(megatron, decision, staged_globs(decision))
    notes = [line]
    if rec.schedule:  # phases are whole policies built from the analysis, which a target does not read again
        notes.append(
            "The recommendation's schedule is not re-solved for a target: this answer holds for the whole run "
            "(ask without a target for the phases)."
        )
    head = decision_headline(context.layout, solved.runs_at, decision, rec.ladder.lifted, lcost)
    return replace(
        rec,
        decision=decision,
        megatron=megatron,
        expected_cost=lcost,
        ladder=replace(rec.ladder, rungs=rungs),
        ladder_cost=ladder_view(lcost),
        rationale=[*(r for r in rec.rationale if not (rec.schedule and r.startswith("Schedule ("))), *notes],
        target=info,
        schedule=(),
        headline=head,
    )


@dataclass(frozen=True)
class _Solved:
    point: Any
    changed: list[tuple[str, str, str]]
    rungs: tuple[Any, ...]
    overrides: tuple[Any, ...]
    plan: SkipPlan
    lcost: dict[str, Any]
    speedup: float
    risk: float | None
    runs_at: dict[str, str]


def _solve(rec: Any, context: RetargetContext, frontier: Frontier, index: int, text: str) -> _Solved:
    """The decision at frontier point `index` as applied: its rungs, skip list, the overrides kept, cost and risk."""
    point = frontier.points[index]
    assignment = frontier.assignment(index)
    changed = [
        (r.layer, r.precision, assignment[r.layer])
        for r in rec.ladder.rungs
        if r.layer in assignment and assignment[r.layer] != r.precision
    ]
    moved = {layer for layer, _, _ in changed}
    said = f"Set to {{}} by target {text} (frontier point {index} of {len(frontier.points) - 1})."
    rungs = tuple(
        replace(r, precision=assignment[r.layer], evidence=(*r.evidence, said.format(assignment[r.layer])))
        if r.layer in moved
        else r
        for r in rec.ladder.rungs
    )
    status = {name: lv.status for name, lv in context.layout.levels.items()}
    ran_bf16 = [n for n in rec.decision.skip_layers if status.get(n) is LayerStatus.BF16]
    skips = tuple(
        n for n in context.layout.levels if (assignment.get(n) == "bf16" and status[n] is not LayerStatus.BF16)
    )
    overrides = tuple(
        o for o in rec.decision.gemm_overrides if o.layer not in moved and assignment.get(o.layer) != "bf16"
    )
    plan = replace(context.plan, skip_layers=(*skips, *ran_bf16), failing_skips=skips, overrides=overrides)
    outer = rec.decision.recipe.name
    runs_at = applied_rungs(rungs, plan.bf16_layers, outer)  # the one cost, as the recommendation counts it
    lcost = answer_cost(context.layout, runs_at, overrides, outer, context.as_logged, context.dims, context.capability)
    counted = counted_rungs(context.layout, runs_at, outer)
    layers = [lv for lv in context.layout.levels.values() if lv.name in counted]
    speedup = float(lcost.get("gemm_speedup_vs_all_bf16", point.speedup))
    risk = _recommended_risk(counted, overrides, context.table, layers)
    return _Solved(point, changed, rungs, overrides, plan, lcost, speedup, risk, runs_at)


def _met(target: Target, speedup: float, risk: float | None) -> bool:
    if target.kind == "speedup":
        return speedup >= target.value - 1e-9
    return risk is not None and risk <= target.value + 1e-12
