"""`overflow` and `scale_instability` detectors on overflows% and scale_inv series.

Rules:
* `overflow`: any post-warm-up overflows% (un-prefixed or `fp8_delayed_scaling_`, which TE only computes under
  delayed scaling) strictly above `overflow_pct`. Severity = band of the worst max in that layer's own bands (a
  mixed-format run: a delayed-scaling layer of an NVFP4 run with FP8's), at least warning.
* `scale_instability`: a jump between consecutive un-prefixed scale_inv_min/max points by at least
  `scale_jump_factor`, measured with the print interval: each logged value v stands for [v − r/2, v + r/2]
  (r = `print_resolution`), and the smallest ratio those intervals allow must reach the factor. Points printed as
  0.0000 (below r/2) are censored: "< 5e-5" is not zero and cannot be sized, so they are left out rather than
  read as a drop to zero. Severity: critical with at least `scale_jumps_critical` jumps in one series. MXFP8's
  E8M0 bytes are converted to exact powers of two first (formats.py): no print interval, no censoring, for the
  layers whose series were bytes only (a mixed-format run's FP8 layers keep their print interval).
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from fp8_policy.policy.analysis.findings import Evidence, Finding, Pattern
from fp8_policy.policy.analysis.layout import LayerStatus, Layout
from fp8_policy.policy.analysis.signals import SCALE_STATS, SeriesSummary, Signals
from fp8_policy.policy.records import MetricName
from fp8_policy.policy.thresholds import Severity, Thresholds, worst


def scale_jumps(
    summary: SeriesSummary, thresholds: Thresholds, *, exact: bool = False
) -> tuple[int, float, int | None]:
    """(number of jumps, largest guaranteed jump ratio, first jump iteration) of a scale_inv series; `exact`
    values (powers of two read from E8M0 bytes) have no print interval and are never censored."""
    half = 0.0 if exact else thresholds.censor_below
    resolved = summary.values >= half if half > 0 else summary.values > 0  # a ratio needs a non-zero base
    if np.count_nonzero(resolved) < 2:
        return 0, 1.0, None
    values = summary.values[resolved]
    iterations = summary.iterations[resolved]
    high = np.maximum(values[:-1], values[1:]) - half
    low = np.minimum(values[:-1], values[1:]) + half
    ratio = high / low
    jumps = np.flatnonzero(ratio >= thresholds.scale_jump_factor)
    if jumps.size == 0:
        return 0, float(ratio.max()), None
    return int(jumps.size), float(ratio.max()), int(iterations[jumps[0] + 1])


def detect_scale_instability(
    layout: Layout, signals: Signals, thresholds: Thresholds, *, exact: bool | Collection[str] = False
) -> list[Finding]:
    """`exact`: the layers whose bare scale_inv series were E8M0 bytes, converted to exact powers of two
    (formats.py; a mixed-format run's MXFP8 layers, not its FP8 ones), or True / False for every layer."""
    evidence: list[Evidence] = []
    for name in _fp8_layers(layout):
        powers = exact if isinstance(exact, bool) else name in exact
        for metric in _scale_metrics(signals, name):
            for summary in signals.get(metric):
                count, ratio, first = scale_jumps(summary, thresholds, exact=powers)
                if count:
                    evidence.append(
                        summary.evidence(rank=len(signals.ranks) > 1, count=count, ratio=ratio, onset=first)
                    )
    if not evidence:
        return []
    evidence.sort(key=lambda ev: (-(ev.count or 0), -(ev.ratio or 0.0)))
    top = evidence[0]
    severity = Severity.CRITICAL if (top.count or 0) >= thresholds.scale_jumps_critical else Severity.WARNING
    layers = tuple(dict.fromkeys(ev.layer for ev in evidence))
    text = (
        f"scale_inv jumps by >= {thresholds.scale_jump_factor:g}x between consecutive points in "
        f"{len(evidence)} series of {len(layers)} layer(s); worst {top.layer} {top.tensor} {top.stat}: "
        f"{top.count} jump(s), up to {top.ratio:.0f}x, first at iteration {top.onset}."
    )
    return [Finding(Pattern.SCALE_INSTABILITY, severity, layers, tuple(evidence), text)]


def detect_overflow(layout: Layout, signals: Signals, thresholds: Thresholds) -> list[Finding]:
    evidence: list[Evidence] = []
    for name in _fp8_layers(layout):
        for metric in _overflow_metrics(signals, name):
            worst_rank = max(signals.get(metric), key=lambda s: s.max, default=None)
            if worst_rank is not None and worst_rank.max > thresholds.overflow_pct:
                first = worst_rank.iterations[np.argmax(worst_rank.values > thresholds.overflow_pct)]
                evidence.append(worst_rank.evidence(onset=int(first)))
    if not evidence:
        return []
    evidence.sort(key=lambda ev: -(ev.max or 0.0))
    top = evidence[0]
    severity = max(Severity.WARNING, worst(_bands(layout, ev.layer, thresholds).band(ev.max or 0.0) for ev in evidence))
    layers = tuple(dict.fromkeys(ev.layer for ev in evidence))
    text = (
        f"overflows% above {thresholds.overflow_pct:g} under delayed scaling in {len(layers)} layer(s); worst "
        f"{top.layer} {top.tensor} max {top.max:.4f}% (mean {top.mean:.4f}%), first at iteration {top.onset}."
    )
    return [Finding(Pattern.OVERFLOW, severity, layers, tuple(evidence), text)]


def _bands(layout: Layout, layer: str, thresholds: Thresholds) -> Thresholds:
    """The bands `layer` is judged with (its own in a mixed-format run: layout.py `own_bands`)."""
    lv = layout.levels.get(layer)
    return lv.bands(thresholds) if lv is not None else thresholds


def _fp8_layers(layout: Layout) -> list[str]:
    return [lv.name for lv in layout.levels.values() if lv.status is LayerStatus.FP8]


def _scale_metrics(signals: Signals, layer: str) -> list[MetricName]:
    return [m for m in signals.layer_metrics(layer) if m.stat in SCALE_STATS and m.recipe is None]


def _overflow_metrics(signals: Signals, layer: str) -> list[MetricName]:
    return [
        m for m in signals.layer_metrics(layer) if m.stat == "overflows%" and m.recipe in (None, "fp8_delayed_scaling")
    ]
