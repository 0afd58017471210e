"""No silent drop: one verdict per (layer, tensor, stat) series, and findings for what the detectors cannot see.

Belongs here: the per-series verdicts every view reads (`series_verdicts`), and the findings that make sure no
series' values go unreported:
* `unassessed`: a series left out of the assessment (`Signals.excluded`: scale_inv stuck at exactly 1.0, no
  point after warm-up) whose values still reach a band. Its level is the `level_quantile` of all its finite
  points; the finding has the severity of that band (overflows%: above `overflow_pct`, at least warning, as the
  `overflow` finding). Reported only where it is worse than what the assessed series of that (layer, tensor,
  stat) already say.
* `non_finite`: NaN/±inf values in a quantization stat (`Signals.nonfinite`, warm-up included), per (layer,
  tensor, stat) over all ranks: critical from `NONFINITE_BURST` logged iterations on (a burst), warning for a
  lone point, with the iterations and what to do.
* `warning_band`: layers whose verdict is at least warning that no other finding reports at that severity (e.g.
  warning-band layers of an otherwise healthy run), so that the findings, the layer table and `gate` agree: every
  layer row at a severity is named by a finding of at least that severity.
Must not be here: pattern logic (patterns.py, trends.py, ...), I/O, web or database imports.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from fp8_policy.policy.analysis.findings import Evidence, Finding, Pattern, SeriesVerdict
from fp8_policy.policy.analysis.layout import LayerStatus, Layout
from fp8_policy.policy.analysis.signals import ExcludedSeries, Signals
from fp8_policy.policy.records import QUANTIZED_TENSORS, MetricName
from fp8_policy.policy.thresholds import Severity, Thresholds, worst

NONFINITE_BURST = 2  # logged iterations with NaN/inf in one series from which it is a burst (critical)
BANDED_STATS: frozenset[str] = frozenset({"underflows%", "overflows%"})
_REASONS = {
    "stuck scale": "its scale_inv_min/max stay exactly 1.0 (no scale was ever computed after warm-up)",
    "warm-up": "it has no point after the warm-up cut",
    "non-finite": "it has no finite value",
}

VerdictKey = tuple[str, str]  # (tensor, canonical stat)


def series_verdicts(layout: Layout, signals: Signals, thresholds: Thresholds) -> dict[str, tuple[SeriesVerdict, ...]]:
    """Per FP8 layer: one verdict per (tensor, stat) it logged (underflows%, overflows%, and any stat with NaN/inf).

    Assessed underflows% → band of the layer's tensor level (the one patterns use); overflows% → as `overflow`;
    an excluded series → band of its raw level (`unassessed`); NaN/inf → as `non_finite`. The worst wins."""
    out: dict[str, tuple[SeriesVerdict, ...]] = {}
    excluded = _excluded_by_key(signals)
    nonfinite = _nonfinite_counts(signals)
    for lv in layout.levels.values():
        if lv.status is not LayerStatus.FP8:
            continue
        found: dict[VerdictKey, SeriesVerdict] = {}
        bands = lv.bands(thresholds)
        for tensor, summary in lv.tensors.items():
            _merge(found, SeriesVerdict(tensor, "underflows%", bands.band(summary.level), summary.level, True))
        for metric in signals.layer_metrics(lv.name):
            if metric.stat == "overflows%" and metric.recipe in (None, "fp8_delayed_scaling"):
                top = max(signals.get(metric), key=lambda s: s.max, default=None)
                if top is not None:
                    _merge(
                        found,
                        SeriesVerdict(metric.tensor, _stat(metric), overflow_band(top.max, bands), top.max, True),
                    )
        for (layer, tensor, stat), series in excluded.items():
            if layer == lv.name:
                top_ex = max(series, key=lambda e: _raw_band(e, bands).rank)
                _merge(
                    found,
                    SeriesVerdict(tensor, stat, _raw_band(top_ex, bands), _finite(top_ex.level), False, top_ex.reason),
                )
        for (layer, tensor, stat), its in nonfinite.items():
            if layer == lv.name:
                _merge(found, SeriesVerdict(tensor, stat, nonfinite_band(its.size), None, False, "non-finite"))
        out[lv.name] = tuple(sorted(found.values(), key=lambda v: (QUANTIZED_TENSORS.index(v.tensor), v.stat)))
    return out


def overflow_band(value: float, thresholds: Thresholds) -> Severity:
    """overflows% above `overflow_pct` is at least warning (the `overflow` finding's rule)."""
    if not value > thresholds.overflow_pct:
        return Severity.OK
    return max(Severity.WARNING, thresholds.band(value))


def nonfinite_band(iterations: int) -> Severity:
    return Severity.CRITICAL if iterations >= NONFINITE_BURST else Severity.WARNING


def detect_unassessed(layout: Layout, signals: Signals, thresholds: Thresholds) -> list[Finding]:
    """Excluded series whose raw values reach a band and are worse than what was assessed for that series."""
    fp8 = {lv.name for lv in layout.fp8()}
    evidence: list[tuple[Severity, ExcludedSeries]] = []
    for (layer, tensor, stat), series in _excluded_by_key(signals).items():
        if layer not in fp8:
            continue
        bands = layout.levels[layer].bands(thresholds)
        top = max(series, key=lambda e: (_raw_band(e, bands).rank, _finite(e.level) or 0.0))
        band = _raw_band(top, bands)
        if band is Severity.OK or band <= _assessed_band(layout, signals, layer, tensor, stat, bands):
            continue
        evidence.append((band, top))
    if not evidence:
        return []
    evidence.sort(key=lambda item: (-item[0].rank, -(_finite(item[1].level) or 0.0)))
    band, top = evidence[0]
    layers = tuple(dict.fromkeys(e.metric.layer for _b, e in evidence))
    reasons = sorted({e.reason for _b, e in evidence})
    text = (
        f"{len(evidence)} series in {len(layers)} layer(s) were left out of the assessment but their values reach "
        f"the {band.value} band: worst {top.metric.layer} {top.metric.tensor} {top.metric.stat_key} p95 "
        f"{top.level:.2f}% (max {top.max:.2f}%) over all {top.values.size} logged points, not assessed because "
        f"{_REASONS.get(top.reason, top.reason)}. Reasons: {', '.join(reasons)}. Treated at the severity of "
        "their values, not as healthy."
    )
    return [Finding(Pattern.UNASSESSED, band, layers, tuple(e.evidence() for _b, e in evidence), text)]


def detect_nonfinite(layout: Layout, signals: Signals, thresholds: Thresholds) -> list[Finding]:
    """NaN/inf in a quantization stat of an FP8 layer, per (layer, tensor, stat) over ranks (see docstring)."""
    fp8 = {lv.name for lv in layout.fp8()}
    ranks: dict[tuple[str, str, str], set[int]] = defaultdict(set)
    for item in signals.nonfinite:
        ranks[(item.metric.layer, item.metric.tensor, _stat(item.metric))].add(item.rank)
    rows = [(key, its) for key, its in _nonfinite_counts(signals).items() if key[0] in fp8]
    if not rows:
        return []
    rows.sort(key=lambda row: (-row[1].size, row[0]))
    evidence = tuple(
        Evidence(
            layer=layer,
            tensor=tensor,
            stat=stat,
            rank=next(iter(ranks[(layer, tensor, stat)])) if len(ranks[(layer, tensor, stat)]) == 1 else None,
            window=(int(its[0]), int(its[-1])),
            onset=int(its[0]),
            count=int(its.size),
        )
        for (layer, tensor, stat), its in rows
    )
    severity = worst(nonfinite_band(its.size) for _key, its in rows)
    (layer, tensor, stat), its = rows[0]
    layers = tuple(dict.fromkeys(key[0] for key, _its in rows))
    where = (
        f"rank {sorted(ranks[(layer, tensor, stat)])[0]}"
        if len(ranks[(layer, tensor, stat)]) == 1
        else (f"{len(ranks[(layer, tensor, stat)])} ranks")
    )
    text = (
        f"NaN/inf in {len(rows)} series of {len(layers)} layer(s); worst {layer} {tensor} {stat}: "
        f"{its.size} logged iteration(s) {_iteration_text(its)} ({where}). The FP8 statistics of that tensor were "
        "not finite there: check the loss and gradient norm at those iterations (a spike, a bad batch, too high a "
        "learning rate); if it recurs in FP8 only, keep the layer in BF16 or switch to a per-tensor current-scaling "
        "recipe, which rescales every step."
    )
    return [Finding(Pattern.NON_FINITE, severity, layers, evidence, text)]


def cover_uncovered(
    findings: list[Finding], verdicts: dict[str, tuple[SeriesVerdict, ...]], thresholds: Thresholds
) -> list[Finding]:
    """A `warning_band` finding for layers whose verdict no finding reports at that severity (empty if none)."""
    covered: dict[str, Severity] = {}
    for finding in findings:
        for name in finding.layers:
            covered[name] = max(covered.get(name, Severity.OK), finding.severity)
    rows: list[tuple[str, SeriesVerdict]] = []
    for name, series in verdicts.items():
        top = max(series, key=lambda v: (v.severity.rank, _finite(v.level) or 0.0), default=None)
        if top is not None and top.severity > Severity.OK and top.severity > covered.get(name, Severity.OK):
            rows.append((name, top))
    if not rows:
        return []
    rows.sort(key=lambda row: (-row[1].severity.rank, -(_finite(row[1].level) or 0.0)))
    severity = rows[0][1].severity
    name, top = rows[0]
    level = f" {top.level:.2f}%" if top.level is not None and math.isfinite(top.level) else ""
    text = (
        f"{len(rows)} layer(s) in the {severity.value} band"
        + (" or below" if any(v.severity < severity for _n, v in rows) else "")
        + f" that no pattern explains; worst {top.tensor} {top.stat}{level} at {name} (warning >= "
        f"{thresholds.warning:g}%, critical >= {thresholds.critical:g}%). Watch them; a layer left in FP8 must stay "
        "below critical."
    )
    evidence = tuple(Evidence(layer=n, tensor=v.tensor, stat=v.stat, level=v.level) for n, v in rows[:20])
    return [Finding(Pattern.WARNING_BAND, severity, tuple(n for n, _v in rows), evidence, text)]


def _stat(metric: MetricName) -> str:
    """The canonical stat a verdict is keyed by: recipe prefix kept (what-if stats), `_columnwise` merged."""
    return f"{metric.recipe}_{metric.stat}" if metric.recipe else metric.stat


def _merge(found: dict[VerdictKey, SeriesVerdict], verdict: SeriesVerdict) -> None:
    key = (verdict.tensor, verdict.stat)
    old = found.get(key)
    if old is None or verdict.severity > old.severity:
        found[key] = verdict


def _excluded_by_key(signals: Signals) -> dict[tuple[str, str, str], list[ExcludedSeries]]:
    """Excluded banded series (underflows%, overflows%) of the quantized tensors, by (layer, tensor, stat)."""
    out: dict[tuple[str, str, str], list[ExcludedSeries]] = defaultdict(list)
    for item in signals.excluded:
        m = item.metric
        if m.stat in BANDED_STATS and m.tensor in QUANTIZED_TENSORS and item.values.size:
            out[(m.layer, m.tensor, _stat(m))].append(item)
    return out


def _nonfinite_counts(signals: Signals) -> dict[tuple[str, str, str], np.ndarray]:
    """Distinct iterations with NaN/inf per (layer, tensor, stat), over every rank."""
    parts: dict[tuple[str, str, str], list[np.ndarray]] = defaultdict(list)
    for item in signals.nonfinite:
        parts[(item.metric.layer, item.metric.tensor, _stat(item.metric))].append(item.iterations)
    return {key: np.unique(np.concatenate(chunks)) for key, chunks in parts.items()}


def _raw_band(item: ExcludedSeries, thresholds: Thresholds) -> Severity:
    if item.metric.stat == "overflows%":
        return overflow_band(item.max, thresholds)
    return thresholds.band(item.level)


def _assessed_band(
    layout: Layout, signals: Signals, layer: str, tensor: str, stat: str, thresholds: Thresholds
) -> Severity:
    """What the assessed series of (layer, tensor, stat) already say."""
    if stat == "underflows%":
        summary = layout.levels[layer].tensors.get(tensor)
        return thresholds.band(summary.level) if summary is not None else Severity.OK
    bands = [
        overflow_band(s.max, thresholds)
        for m in signals.layer_metrics(layer)
        if m.tensor == tensor and _stat(m) == stat
        for s in signals.get(m)
    ]
    return worst(bands)


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _iteration_text(its: np.ndarray) -> str:
    if its.size == 1:
        return f"at iteration {int(its[0])}"
    return f"between iterations {int(its[0])} and {int(its[-1])}"
