"""`rank_outlier`: one rank disagreeing with the others, found with scikit-learn's LocalOutlierFactor.

Rules:
* A feature is one observed FP8 layer's un-prefixed underflows% of one tensor; its values are the ranks' levels.
* Pre-filter (numpy): at least `rank_outlier_min_ranks` ranks, the highest rank level at least the layer's
  `warning`, and some
  rank at least `rank_outlier_gap` away from the median of the other ranks. At most `rank_outlier_max_features`
  features are tested, largest gap first.
* Model: LocalOutlierFactor with n_neighbors = min(n - 1, max(2, n // 2)) on the ranks' levels. A rank is an
  outlier when its LOF score is at least `rank_outlier_score` and it differs from the other ranks' median by at
  least `rank_outlier_gap` and by the factor `rank_outlier_ratio` (1-D LOF on a handful of ranks also scores
  plain rank-to-rank noise highly; the ratio keeps that out). LOF compares a rank's distance to its neighbours
  with their own, so one bad rank in 8 stands out; mean ± 3·std can never flag one rank in 8 (its z-score is at
  most (n−1)/√n ≈ 2.47) because the outlier inflates the std it is judged by.
* Consistency: a rank is reported only when it is an outlier on at least 2 series and on at least
  `rank_outlier_min_share` of the (layer, tensor) series assessed across ranks. A rank whose data or hardware
  is off disagrees on many layers; independent rank-to-rank noise produces isolated disagreements instead.
* One finding per outlier rank, severity = band of its worst outlying level (at least warning; each level in its
  layer's own bands: a mixed-format run's NVFP4 layer with NVFP4's, FP8 layer with FP8's). A rank that is
  a high outlier for a (layer, tensor) is left out of that tensor's per-layer level (the worst of the other
  ranks): one disagreeing rank points at that rank's data or hardware, not at the layer's precision.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping

import numpy as np

from fp8_policy.policy.analysis.findings import Evidence, Finding, Pattern
from fp8_policy.policy.analysis.signals import SeriesSummary, Signals
from fp8_policy.policy.records import QUANTIZED_TENSORS, MetricName
from fp8_policy.policy.thresholds import Severity, Thresholds, worst


def others_median(values: np.ndarray, index: int) -> float:
    return float(np.median(np.delete(values, index)))


def max_gap(values: np.ndarray) -> float:
    """Largest distance of one value from the median of the others."""
    return max(abs(float(values[i]) - others_median(values, i)) for i in range(values.size))


def lof_outliers(values: np.ndarray, thresholds: Thresholds) -> list[tuple[int, float]]:
    """(index, LOF score) of the values that are outliers among `values` (one value per rank)."""
    n = values.size
    if n < thresholds.rank_outlier_min_ranks:
        return []
    # Imported here, on the first multi-rank run: scikit-learn brings SciPy and pandas, 1-4 s of import that a
    # service's start-up (and a single-rank upload) need not pay.
    from sklearn.neighbors import LocalOutlierFactor

    model = LocalOutlierFactor(n_neighbors=min(n - 1, max(2, n // 2)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate values (4-decimal logs) warn but still score correctly
        model.fit(values.reshape(-1, 1))
    scores = -model.negative_outlier_factor_
    return [
        (i, float(scores[i]))
        for i in range(n)
        if scores[i] >= thresholds.rank_outlier_score
        and _differs(float(values[i]), others_median(values, i), thresholds)
    ]


def _differs(value: float, reference: float, thresholds: Thresholds) -> bool:
    high, low = max(value, reference), min(value, reference)
    return high - low >= thresholds.rank_outlier_gap and high >= thresholds.rank_outlier_ratio * low


def _features(
    fp8_layers: Iterable[str],
    signals: Signals,
    thresholds: Thresholds,
    layer_bands: Mapping[str, Thresholds],
) -> tuple[list[tuple[list[SeriesSummary], np.ndarray]], int]:
    """The features to test (largest gap first) and how many (layer, tensor) series were assessed."""
    scored = []
    assessed = 0
    for layer in fp8_layers:
        warning = layer_bands.get(layer, thresholds).warning
        for tensor in QUANTIZED_TENSORS:
            series = signals.get(MetricName(layer, tensor, "underflows%"))
            if len(series) < thresholds.rank_outlier_min_ranks:
                continue
            assessed += 1
            levels = np.array([s.level for s in series])
            if not levels.max() >= warning:
                continue
            gap = max_gap(levels)
            if gap >= thresholds.rank_outlier_gap:
                scored.append((gap, series, levels))
    scored.sort(key=lambda item: -item[0])
    return [(series, levels) for _, series, levels in scored[: thresholds.rank_outlier_max_features]], assessed


def detect_rank_outliers(
    fp8_layers: Iterable[str],
    signals: Signals,
    thresholds: Thresholds,
    layer_bands: Mapping[str, Thresholds] | None = None,
) -> tuple[list[Finding], frozenset[tuple[str, str, int]]]:
    """Findings per outlier rank, and the (layer, tensor, rank) series of high outliers to leave out of levels;
    `layer_bands`: the layers judged with other bands than `thresholds` (a mixed-format run: formats.py)."""
    own = layer_bands or {}
    if len(signals.ranks) < thresholds.rank_outlier_min_ranks:
        return [], frozenset()
    by_rank: dict[int, list[Evidence]] = {}
    high: dict[int, set[tuple[str, str, int]]] = {}
    features, assessed = _features(fp8_layers, signals, thresholds, own)
    for series, levels in features:
        for index, score in lof_outliers(levels, thresholds):
            summary, reference = series[index], others_median(levels, index)
            by_rank.setdefault(summary.rank, []).append(summary.evidence(rank=True, reference=reference, ratio=score))
            if summary.level > reference:
                high.setdefault(summary.rank, set()).add((summary.metric.layer, summary.metric.tensor, summary.rank))
    needed = max(2, thresholds.rank_outlier_min_share * assessed)
    confirmed = {rank: evidence for rank, evidence in by_rank.items() if len(evidence) >= needed}
    findings = [
        _finding(rank, evidence, len(signals.ranks), thresholds, own) for rank, evidence in sorted(confirmed.items())
    ]
    excluded = set().union(*(high.get(rank, set()) for rank in confirmed))
    return findings, frozenset(excluded)


def _finding(
    rank: int, evidence: list[Evidence], n_ranks: int, thresholds: Thresholds, own: Mapping[str, Thresholds]
) -> Finding:
    evidence.sort(key=lambda ev: -abs((ev.level or 0.0) - (ev.reference or 0.0)))
    top = evidence[0]
    severity = max(Severity.WARNING, worst(own.get(ev.layer, thresholds).band(ev.level or 0.0) for ev in evidence))
    text = (
        f"rank {rank} disagrees with the other {n_ranks - 1} ranks on {len(evidence)} series; largest: "
        f"{top.layer} {top.tensor} underflows% {top.level:.2f}% vs the others' median {top.reference:.2f}% "
        f"(LOF {top.ratio:.1f})."
    )
    layers = tuple(dict.fromkeys(ev.layer for ev in evidence))
    return Finding(Pattern.RANK_OUTLIER, severity, layers, tuple(evidence), text)
