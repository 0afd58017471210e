"""The `rationale` of a recommendation: sentences with the numbers behind every decision.

Belongs here: wording only. Every number comes from the analysis, the plan, the recipe decision or the cost.
Number formats (the same in every sentence): underflow levels `3.93%` (2 decimals), thresholds as set (`2%`),
shares of GEMM FLOPs `16.3%` (1 decimal), speed factors `1.58x`, confidence `0.77`.
"""

from __future__ import annotations

from typing import Any

from fp8_policy.policy.analysis.findings import Pattern
from fp8_policy.policy.analysis.recipes import RECIPE_LABELS
from fp8_policy.policy.analysis.result import Analysis
from fp8_policy.policy.recommend.recipe import RecipeDecision
from fp8_policy.policy.recommend.skiplist import SkipPlan

MAX_NAMED = 5


def _names(names: tuple[str, ...] | list[str]) -> str:
    shown = ", ".join(names[:MAX_NAMED])
    return shown + (f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else "")


def build_rationale(
    analysis: Analysis,
    plan: SkipPlan,
    decision: RecipeDecision,
    cost: dict[str, Any],
    megatron: dict[str, Any],
    confidence: tuple[float, list[str]],
) -> list[str]:
    lines = [f"[{f.severity.value}] {f.summary}" for f in analysis.findings[:6]]
    choice = decision.choice
    lines += _plan_lines(analysis, plan, "NVFP4" if choice.name == "nvfp4" else "FP8")
    kwargs = ", ".join(f"{key}={value}" for key, value in choice.kwargs.items()) or "defaults"
    if decision.trained_in == "bf16":  # no recipe to call current: say what the run trained in and that it changes
        current = (
            f"Trained in: BF16 (high precision, no FP8/FP4 recipe: {decision.current_source}); the recommendation "
            f"changes the run from BF16 to {RECIPE_LABELS[choice.name]}"
        )
    else:
        current = (
            f"Current recipe: {RECIPE_LABELS.get(decision.current, decision.current)} "
            f"({decision.current_source or 'given'})"
        )
    lines.append(
        f"Recipe: {RECIPE_LABELS[choice.name]} with {kwargs}: {choice.reason} {current}; "
        f"GPU: {decision.capability_source}."
    )
    lines += decision.notes
    lines.append(_cost_line(cost))
    lines.append(_megatron_line(megatron))
    value, reasons = confidence
    lines.append(f"Confidence {value:.2f}" + (f": {'; '.join(reasons)}." if reasons else ": no doubts found."))
    return lines


def _plan_lines(analysis: Analysis, plan: SkipPlan, fmt: str) -> list[str]:
    """`fmt`: the low-precision format the plan judged (NVFP4 under an NVFP4 recipe, else FP8)."""
    th = analysis.thresholds
    critical = plan.critical if plan.critical is not None else th.critical  # the band the plan judged with
    under = f" ({plan.band})" if plan.band else ""
    lines = []
    if plan.failing_skips:
        judged = dict(plan.failing_levels)
        detail = [f"{name} ({judged.get(name) or _failing(analysis, name)})" for name in plan.failing_skips]
        lines.append(
            f"Skip {len(plan.failing_skips)} layer(s) to BF16, each with two or more tensors (or one, where not all "
            f"three are logged) at or above {critical:g}% underflow{under}: {_names(detail)}."
        )
    if plan.lifted:
        detail = [f"{name} ({_failing(analysis, name)})" for name in plan.lifted]
        lines.append(
            f"Lift {len(plan.lifted)} layer(s) at or above {th.critical:g}% {fmt} underflow to an FP8 rung instead "
            f"of BF16 (their failure is underflow only; the precision ladder gives each rung, its evidence and "
            f"confidence): {_names(detail)}."
        )
    lines += [f"Keep {'+'.join(o.gemms)} of {o.layer} in BF16: {o.reason}." for o in plan.overrides[:MAX_NAMED]]
    if len(plan.overrides) > MAX_NAMED:
        lines.append(f"... and {len(plan.overrides) - MAX_NAMED} more GEMM override(s) of the same kind.")
    changed = set(plan.skip_layers) | {o.layer for o in plan.overrides}
    for finding in analysis.by_pattern(Pattern.BOUNDARY):
        layer = finding.layers[0]
        action = (
            "its failing GEMMs go to BF16 here; do not answer it with more BF16 blocks, which moves the "
            f"effect to the new {fmt} layer next to the BF16 edge"
            if layer in changed
            else f"it stays in {fmt} below {critical:g}%: watch it"
        )
        lines.append(f"Boundary effect at {layer}: the {fmt} layer next to a BF16 block degrades; {action}.")
    if plan.kept_bf16:
        lines.append(
            f"{len(plan.kept_bf16)} layer(s) already ran in BF16 (no {fmt} training stats; a what-if of theirs "
            "is in the ladder's evidence); they stay in "
            f"BF16: {_names(list(plan.kept_bf16))}."
        )
    if plan.deferred:
        lines.append(
            f"{len(plan.deferred)} failing layer(s) are not skipped: most layers fail, so the recipe "
            "changes instead; re-run with it and re-analyze before skipping anything."
        )
    if plan.watch:
        lines.append(
            f"Watch {len(plan.watch)} layer(s) with a rising trend, below {critical:g}% today and left "
            f"in {fmt}: {_names(list(plan.watch))}."
        )
    if not (plan.failing_skips or plan.overrides or plan.deferred or plan.lifted):
        lines.append(f"No {fmt} layer reaches {critical:g}% underflow{under}: nothing to skip or override.")
    return lines


def _failing(analysis: Analysis, name: str) -> str:
    row = analysis.layer(name)
    parts = [f"{t} {u.level:.2f}%" for t, u in row.underflows.items() if u.level >= analysis.thresholds.critical]
    return ", ".join(parts) or "projected to fail"


def _cost_line(cost: dict[str, Any]) -> str:
    """The answer's one cost sentence (recommend/cost.py): the precision mix and what it buys, from one table."""
    if "gemm_speedup_vs_all_bf16" not in cost:
        return "Expected cost: no GEMM layers to weigh."
    share = cost["gemm_share"]
    return (
        f"Expected cost: GEMM FLOPs {share['fp4']:.1%} FP4 / {share['fp8']:.1%} FP8 / {share['bf16']:.1%} BF16 "
        f"({cost['moved_to_bf16_share']:+.1%} BF16 vs the run as logged, by {cost['method'].replace('_', ' ')}): "
        f"{cost['gemm_speedup_vs_all_bf16']:.2f}x faster than all-BF16 GEMMs, GEMM time "
        f"{cost['gemm_slowdown_vs_all_fp8_pct']:+.1f}% vs every layer at {cost['fp8_recipe']} "
        f"({cost['fp8_gemm_speedup']}x, {cost['speedup_measured_on']}) and x{cost['gemm_time_vs_as_logged']:.2f} of "
        f"the run as logged ({cost['source']})."
    )


def _megatron_line(megatron: dict[str, Any]) -> str:
    if megatron.get("fp4_recipe"):
        return f"Megatron: {' '.join(megatron['extra_args'])} (FP4: no --fp8-format next to --fp4-format)."
    if megatron["first_last_layers_bf16"]:
        text = (
            f"Megatron: --first-last-layers-bf16 with {megatron['num_layers_at_start_in_bf16']} layer(s) at the "
            f"start and {megatron['num_layers_at_end_in_bf16']} at the end, --fp8-recipe "
            f"{megatron['fp8_recipe']}"
        )
        partial = megatron["blocks_needing_precision_config"]
        return text + (f"; blocks {partial} (0-based) need --te-precision-config-file." if partial else ".")
    return (
        f"Megatron: --fp8-recipe {megatron['fp8_recipe']}; no whole first/last block is in BF16, so "
        "--first-last-layers-bf16 is off and --te-precision-config-file carries the modules."
        if megatron["blocks_needing_precision_config"]
        else f"Megatron: --fp8-recipe {megatron['fp8_recipe']}, no whole transformer layer in BF16."
    )
