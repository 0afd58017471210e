"""Confidence of a recommendation (0–1): start at 1 and multiply by a factor per documented doubt.

Factors: few post-warm-up points (×0.6 under `min_points`, ×0.85 under 4×`min_points`), single rank (×0.9),
rank outliers (×0.85), more than half the scale_inv points printed as 0.0000 (×0.9), NaN/inf points (×0.85),
layers within ±15 % of the critical threshold (×0.9, decisions near a boundary), more than 20 % of FP8 layers
without stats (×0.85), a recipe change not backed by logged what-if stats (×0.85), an assumed GPU (×0.9),
a failing set deferred to a recipe change (×0.8). Floor 0.05.
"""

from __future__ import annotations

from fp8_policy.policy.analysis.findings import Pattern
from fp8_policy.policy.analysis.layout import LayerStatus
from fp8_policy.policy.analysis.result import Analysis
from fp8_policy.policy.recommend.recipe import RecipeDecision
from fp8_policy.policy.recommend.skiplist import SkipPlan


def confidence(analysis: Analysis, plan: SkipPlan, decision: RecipeDecision) -> tuple[float, list[str]]:
    """(confidence, one sentence per factor applied)."""
    factors: list[tuple[float, str]] = []
    th, stats = analysis.thresholds, analysis.stats
    points = float(stats.get("median_points_per_series", 0.0))
    if points < th.min_points:
        factors.append((0.6, f"only {points:.0f} post-warm-up points per series"))
    elif points < 4 * th.min_points:
        factors.append((0.85, f"{points:.0f} post-warm-up points per series"))
    if len(stats.get("ranks", [])) == 1:
        factors.append((0.9, "a single rank (rank agreement unchecked)"))
    if analysis.by_pattern(Pattern.RANK_OUTLIER):
        factors.append((0.85, "ranks disagree (rank_outlier)"))
    if stats.get("censored_scale_fraction", 0.0) > 0.5:
        factors.append((0.9, f"{stats['censored_scale_fraction']:.0%} of scale_inv points print as 0.0000"))
    if stats.get("nonfinite_points", 0):
        factors.append((0.85, f"{stats['nonfinite_points']} NaN/inf points"))
    factors += _layer_factors(analysis)
    if decision.changed and decision.whatif is None:
        factors.append((0.85, f"the switch to {decision.choice.name} is not backed by logged what-if stats"))
    if decision.capability is None:
        factors.append((0.9, "the GPU is unknown"))
    if plan.deferred:
        factors.append((0.8, f"{len(plan.deferred)} failing layer(s) left to the recipe change"))
    value = 1.0
    for factor, _ in factors:
        value *= factor
    return round(max(0.05, value), 2), [f"{text} (x{factor:g})" for factor, text in factors]


def _layer_factors(analysis: Analysis) -> list[tuple[float, str]]:
    out = []
    th = analysis.thresholds
    levels = [
        row.worst_level
        for row in analysis.layers
        if row.status == LayerStatus.FP8.value and row.worst_level is not None
    ]
    near = [v for v in levels if abs(v - th.critical) <= 0.15 * th.critical]
    if near:
        out.append((0.9, f"{len(near)} layer(s) within 15% of the {th.critical:g}% critical threshold"))
    fp8 = sum(1 for row in analysis.layers if row.status in (LayerStatus.FP8.value, LayerStatus.UNOBSERVED.value))
    unobserved = sum(1 for row in analysis.layers if row.status == LayerStatus.UNOBSERVED.value)
    if fp8 and unobserved / fp8 > 0.2:
        out.append((0.85, f"{unobserved} of {fp8} FP8 layers have no FP8 stats"))
    return out
