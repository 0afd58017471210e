"""The per-layer table of an analysis (`LayerAssessment` rows) and the run-level stats and notes.

Belongs here: turning `Layout` + findings into rows, counts and caveat sentences. Must not be here: detection.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fp8_policy.policy.analysis.findings import Finding, LayerAssessment, SeriesVerdict, TensorUnderflow
from fp8_policy.policy.analysis.layout import LayerLevels, LayerStatus, Layout
from fp8_policy.policy.analysis.signals import SCALE_STATS, Signals
from fp8_policy.policy.thresholds import Thresholds, worst


def assessment_table(
    layout: Layout,
    findings: list[Finding],
    thresholds: Thresholds,
    verdicts: dict[str, tuple[SeriesVerdict, ...]] | None = None,
) -> list[LayerAssessment]:
    """One row per layer of the run (ignored ones included, marked as such), in run order. A row's severity is
    the worst of its series' verdicts (`coverage.series_verdicts`), the one every view uses."""
    patterns: dict[str, list[str]] = {}
    for finding in findings:
        for name in finding.layers:
            patterns.setdefault(name, [])
            if finding.pattern.value not in patterns[name]:
                patterns[name].append(finding.pattern.value)
    verdicts = verdicts or {}
    return [
        _row(lv, tuple(patterns.get(lv.name, ())), thresholds, verdicts.get(lv.name, ()))
        for lv in layout.levels.values()
    ]


def _row(
    lv: LayerLevels, patterns: tuple[str, ...], thresholds: Thresholds, series: tuple[SeriesVerdict, ...]
) -> LayerAssessment:
    structure = lv.info.structure
    bands = lv.bands(thresholds)
    underflows = {
        t: TensorUnderflow(s.level, s.max, s.mean, s.last, bands.band(s.level)) for t, s in lv.tensors.items()
    }
    pick = lv.worst_tensor()
    signal, level = (f"{pick[0]} underflows%", pick[1].level) if pick else (None, None)
    severity = worst([lv.severity, *(v.severity for v in series)])
    if severity > lv.severity:  # an overflow, NaN/inf or unassessed series is worse than the underflow levels
        top = max(series, key=lambda v: v.severity.rank)
        signal, level = f"{top.tensor} {top.stat}", top.level
    return LayerAssessment(
        name=lv.name,
        group=structure.group.value,
        index=structure.index,
        sublayer=structure.sublayer,
        precision=lv.info.precision.value,
        status=lv.status.value,
        severity=severity,
        worst_signal=signal,
        worst_level=level,
        underflows=underflows,
        patterns=patterns,
        series=series,
    )


def run_stats(layout: Layout, signals: Signals, thresholds: Thresholds) -> dict[str, Any]:
    summaries = [s for group in signals.summaries.values() for s in group]
    points = np.array([s.n_points for s in summaries]) if summaries else np.zeros(1)
    counts = {status.value: 0 for status in LayerStatus}
    for lv in layout.levels.values():
        counts[lv.status.value] += 1
    return {
        "n_series": signals.n_series,
        "n_series_used": len(summaries),
        "ranks": list(signals.ranks),
        "iterations": [signals.first_iteration, signals.last_iteration],
        "warmup_cut_iteration": round(signals.warmup_cut, 1),
        "warmup_rule": (
            f"first {thresholds.warmup_fraction:.0%} of the iteration span, and points before "
            "scale_inv leaves exactly 1.0"
        ),
        "level_rule": (
            f"p{thresholds.level_quantile * 100:g} of the trailing {thresholds.window_fraction:.0%} "
            "of the post-warm-up span, worst rank"
        ),
        "median_points_per_series": float(np.median(points)),
        "layers_by_status": counts,
        "body_blocks": len(layout.blocks),
        "index_base": layout.index_base,
        "censored_scale_fraction": censored_scale_fraction(signals),
        "nonfinite_points": int(sum(s.n_nonfinite for s in summaries)),
        "warmup_only_series": signals.warmup_only,
        "stat_prefix": signals.stat_prefix,
    }


def censored_scale_fraction(signals: Signals) -> float:
    """Share of post-warm-up scale_inv points printed as 0.0000 (< 5e-5)."""
    total = censored = 0
    for metric, group in signals.summaries.items():
        if metric.stat in SCALE_STATS:
            total += sum(s.n_points for s in group)
            censored += sum(s.censored for s in group)
    return censored / total if total else 0.0


def run_notes(
    layout: Layout,
    signals: Signals,
    stats: dict[str, Any],
    thresholds: Thresholds,
    session_offsets: dict[str, int] | None = None,
) -> list[str]:
    notes = []
    for path, offset in sorted((session_offsets or {}).items()):
        notes.append(
            f"{path} restarted its iteration counter (a resumed session): it is read as a later segment, its "
            f"iterations offset by {offset:,} to follow the earlier session, so none of its values overwrite "
            "the earlier session's at the same iteration numbers."
        )
    censored = stats["censored_scale_fraction"]
    if censored > 0:
        notes.append(
            f"{censored:.0%} of scale_inv points print as 0.0000: they are below 5e-5, not zero; "
            "scale jumps are only measured between resolvable points."
        )
    if stats["warmup_only_series"]:
        notes.append(
            f"{stats['warmup_only_series']} series have no point after warm-up (scale_inv still exactly "
            "1.0, or no finite value) and were not assessed; those whose values reach a band are the "
            "`unassessed` finding, at the severity of their values."
        )
    if stats["nonfinite_points"]:
        notes.append(
            f"{stats['nonfinite_points']} NaN/inf points were left out of every statistic (they are the "
            "`non_finite` finding)."
        )
    unobserved = [lv.name for lv in layout.levels.values() if lv.status is LayerStatus.UNOBSERVED]
    if unobserved:
        notes.append(
            f"{len(unobserved)} FP8 layer(s) have no FP8 stats and could not be assessed (e.g. {unobserved[0]})."
        )
    if stats["median_points_per_series"] < thresholds.min_points:
        notes.append(
            f"Only {stats['median_points_per_series']:.0f} post-warm-up points per series (median): "
            "levels and trends are uncertain."
        )
    if len(signals.ranks) == 1:
        notes.append("Single rank: rank consistency could not be checked.")
    return notes
