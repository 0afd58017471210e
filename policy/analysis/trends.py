"""`rising_trend`: robust (scikit-learn HuberRegressor) trend fits, projections and late onsets.

Two kinds of rising trend, both on an observed FP8 layer's worst-rank underflows% series per tensor:
* Significant: the fitted slope is positive, at least `trend_min_t` standard errors (from the residuals around
  the Huber line) above zero, and rises by at least `trend_min_rise` over the fit window: noise on a flat layer
  is no trend.
* projected — below `critical` today, the significant line fitted on the trailing `trend_fit_fraction` of the
  post-warm-up span reaches `critical` within `trend_horizon` post-warm-up spans after the last point.
  Severity warning (a forecast); the layer stays in FP8 and is watched.
* crossed (late onset) — at or above `critical` today, but the first 10 % of the post-warm-up points (at least 3)
  have a median below `critical`, and the significant line fitted on the whole post-warm-up span starts below
  `critical` and ends at or above it. Severity = band of the level; the finding explains the layer (it is not
  also reported as an isolated single_tensor failure).
Cheap numpy pre-filters pick the candidates (at most `trend_max_candidates` per kind, most promising first); only
those are fitted, on at most 400 evenly spaced points. Huber down-weights spikes: ordinary least squares tilts the
line towards a few late spikes and projects a crossing that the sustained level does not support.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import numpy as np

from fp8_policy.policy.analysis.findings import Evidence, Finding, Pattern
from fp8_policy.policy.analysis.layout import LayerLevels, Layout
from fp8_policy.policy.analysis.signals import SeriesSummary, onset
from fp8_policy.policy.thresholds import Severity, Thresholds, worst

MAX_FIT_POINTS = 400
EARLY_SHARE = 0.1  # share of post-warm-up points that show where a crossed series started


@dataclass(frozen=True, slots=True)
class TrendFit:
    """A robust line through part of one series: slope per 1k iterations and its projection."""

    slope_per_1k: float
    t_value: float  # slope / its standard error
    value_at_start: float  # fitted value at the first iteration of the fit window
    value_at_last: float  # fitted value at the last iteration of the fit window
    fit_window: tuple[int, int]
    projected_iteration: int
    projected_value: float
    crossing_iteration: int | None  # where the line reaches `critical` (None when it never does)

    def rise(self) -> float:
        return self.value_at_last - self.value_at_start


def fit_window(summary: SeriesSummary, fraction: float, min_points: int) -> tuple[np.ndarray, np.ndarray]:
    """The trailing `fraction` of the post-warm-up points (at least `min_points`)."""
    it, values = summary.iterations, summary.values
    begin = it[-1] - fraction * float(it[-1] - it[0])
    index = max(0, min(int(np.searchsorted(it, begin)), it.size - min_points))
    return it[index:], values[index:]


def huber_line(iterations: np.ndarray, values: np.ndarray) -> tuple[float, float, float]:
    """(slope per 1k iterations, value at the last iteration, t-value of the slope) of a HuberRegressor fit.

    The t-value uses the standard deviation of the residuals around the Huber line (a MAD scale is too small on
    a few dozen points and made noise look significant): slope / (sd / sqrt(sum((x - mean x)^2)))."""
    if iterations.size > MAX_FIT_POINTS:
        pick = np.linspace(0, iterations.size - 1, MAX_FIT_POINTS).round().astype(np.int64)
        iterations, values = iterations[pick], values[pick]
    # Imported on first use: scikit-learn brings SciPy and pandas (1-4 s) that a service's start-up need not pay;
    # a serving process imports it in the background once it answers (service/ingest/worker.py warm_up_process).
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import HuberRegressor

    x = ((iterations - iterations[-1]) / 1000.0).reshape(-1, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = HuberRegressor(epsilon=1.35, alpha=0.0, max_iter=500).fit(x, values)
    slope = float(model.coef_[0])
    residuals = values - model.predict(x)
    scale = float(np.sqrt(np.sum(residuals**2) / max(1, residuals.size - 2)))  # spikes count as noise here
    spread = float(np.sqrt(np.sum((x[:, 0] - x[:, 0].mean()) ** 2)))
    error = scale / spread if spread > 0 else np.inf
    t_value = slope / error if error > 0 else (np.inf if slope > 0 else 0.0)
    return slope, float(model.intercept_), t_value


def robust_trend(summary: SeriesSummary, thresholds: Thresholds, fraction: float | None = None) -> TrendFit:
    """Huber fit on the trailing `fraction` (default `trend_fit_fraction`) of the series, projected ahead."""
    share = thresholds.trend_fit_fraction if fraction is None else fraction
    it, values = fit_window(summary, share, thresholds.min_points)
    slope, at_last, t_value = huber_line(it, values)
    return project(slope, at_last, (int(it[0]), int(it[-1])), summary, thresholds, t_value)


def project(
    slope: float,
    value_at_last: float,
    window: tuple[int, int],
    summary: SeriesSummary,
    thresholds: Thresholds,
    t_value: float = np.inf,
) -> TrendFit:
    """A line given by its slope per 1k and its value at the window's end, extended `trend_horizon` spans."""
    span = float(summary.iterations[-1] - summary.iterations[0])
    ahead = thresholds.trend_horizon * span
    at_start = value_at_last - slope * (window[1] - window[0]) / 1000.0
    crossing = None
    if slope > 0 and value_at_last < thresholds.critical:
        crossing = int(round(window[1] + 1000.0 * (thresholds.critical - value_at_last) / slope))
    elif slope > 0 and at_start < thresholds.critical:
        crossing = int(round(window[0] + 1000.0 * (thresholds.critical - at_start) / slope))
    return TrendFit(
        slope,
        t_value,
        at_start,
        value_at_last,
        window,
        int(round(window[1] + ahead)),
        value_at_last + slope * ahead / 1000.0,
        crossing,
    )


def is_significant(fit: TrendFit, thresholds: Thresholds) -> bool:
    return fit.slope_per_1k > 0 and fit.t_value >= thresholds.trend_min_t and fit.rise() >= thresholds.trend_min_rise


def is_projected(fit: TrendFit, thresholds: Thresholds) -> bool:
    return is_significant(fit, thresholds) and fit.projected_value >= thresholds.critical


def has_crossed(fit: TrendFit, thresholds: Thresholds) -> bool:
    return is_significant(fit, thresholds) and fit.value_at_start < thresholds.critical <= fit.value_at_last


def _series(layout: Layout) -> list[SeriesSummary]:
    return [s for lv in layout.fp8() for s in lv.tensors.values()]


def projected_candidates(layout: Layout, thresholds: Thresholds) -> list[SeriesSummary]:
    scored = []
    for summary in _series(layout):
        if summary.level >= thresholds.critical or summary.n_points < thresholds.min_points:
            continue
        _, values = fit_window(summary, thresholds.trend_fit_fraction, thresholds.min_points)
        quarter = max(1, values.size // 4)
        rise = float(np.median(values[-quarter:]) - np.median(values[:quarter]))
        if rise >= thresholds.trend_min_rise / 2.0:
            scored.append((summary.level + rise, summary))
    scored.sort(key=lambda item: -item[0])
    return [summary for _, summary in scored[: thresholds.trend_max_candidates]]


def crossed_candidates(layout: Layout, thresholds: Thresholds) -> list[SeriesSummary]:
    scored = []
    for summary in _series(layout):
        if summary.level < thresholds.critical or summary.n_points < max(thresholds.min_points, 6):
            continue
        early = float(np.median(summary.values[: max(3, int(EARLY_SHARE * summary.n_points))]))
        if early < thresholds.critical:
            scored.append((summary.level - early, summary))
    scored.sort(key=lambda item: -item[0])
    return [summary for _, summary in scored[: thresholds.trend_max_candidates]]


def detect_rising_trends(layout: Layout, thresholds: Thresholds) -> list[Finding]:
    """One `rising_trend` finding over every layer, each layer's series judged with its own bands (a mixed-format
    run's FP8 layers of an NVFP4 run with FP8's, layout.py)."""
    groups: list[tuple[Thresholds, list[Evidence], list[Evidence]]] = []
    for bands, view in _band_views(layout, thresholds):
        evidence: list[Evidence] = []
        for summary in projected_candidates(view, bands):
            fit = robust_trend(summary, bands)
            if is_projected(fit, bands):
                evidence.append(_evidence(summary, fit, bands))
        crossed: list[Evidence] = []
        for summary in crossed_candidates(view, bands):
            fit = robust_trend(summary, bands, fraction=1.0)
            if has_crossed(fit, bands):
                crossed.append(_evidence(summary, fit, bands))
        if evidence or crossed:
            groups.append((bands, crossed, evidence))
    if not groups:
        return []
    return [_finding(groups)]


def _band_views(layout: Layout, thresholds: Thresholds) -> list[tuple[Thresholds, Layout]]:
    """The layout split by the bands its layers are judged with (one view when every layer uses the run's)."""
    own = [lv for lv in layout.levels.values() if lv.own_bands is not None]
    if not own:
        return [(thresholds, layout)]
    groups: dict[tuple[float, float, float], tuple[Thresholds, dict[str, LayerLevels]]] = {}
    for name, lv in layout.levels.items():
        bands = lv.bands(thresholds)
        groups.setdefault((bands.warning, bands.critical, bands.severe), (bands, {}))[1][name] = lv
    return [(bands, replace(layout, levels=levels)) for bands, levels in groups.values()]


def _evidence(summary: SeriesSummary, fit: TrendFit, thresholds: Thresholds) -> Evidence:
    return summary.evidence(
        slope_per_1k=fit.slope_per_1k,
        onset=onset(summary, thresholds.warning),
        projected_value=fit.projected_value,
        projected_iteration=fit.projected_iteration,
        crossing_iteration=fit.crossing_iteration,
    )


def _finding(groups: list[tuple[Thresholds, list[Evidence], list[Evidence]]]) -> Finding:
    parts = []
    severities = [Severity.WARNING]
    for thresholds, crossed, projected in groups:
        if crossed:
            top = max(crossed, key=lambda ev: ev.level or 0.0)
            parts.append(
                f"{len(crossed)} series crossed {thresholds.critical:g}% during the run (late onset), e.g. "
                f"{top.layer} {top.tensor} {top.start_level:.2f}% -> {top.level:.2f}%, "
                f"+{top.slope_per_1k:.3f}%/1k iterations, crossing near iteration {top.crossing_iteration}"
            )
        if projected:
            first = min(projected, key=lambda ev: ev.crossing_iteration or 1 << 62)
            parts.append(
                f"{len(projected)} series below {thresholds.critical:g}% are projected to cross it, first "
                f"{first.layer} {first.tensor}: {first.level:.2f}% now, +{first.slope_per_1k:.3f}%/1k "
                f"iterations, {first.projected_value:.2f}% by iteration {first.projected_iteration}"
            )
        severities += [thresholds.band(ev.level or 0.0) for ev in crossed]
    evidence = [ev for _th, crossed, projected in groups for ev in (*crossed, *projected)]
    layers = tuple(dict.fromkeys(ev.layer for ev in evidence))
    return Finding(Pattern.RISING_TREND, worst(severities), layers, tuple(evidence), "; ".join(parts) + " (Huber fit).")


def crossed_layers(findings: list[Finding], thresholds: Thresholds, layout: Layout | None = None) -> set[str]:
    """Layers a rising_trend finding explains: those whose series crossed critical (their own bands, given the
    `layout`) during the run."""

    def critical(layer: str) -> float:
        lv = layout.levels.get(layer) if layout is not None else None
        return lv.bands(thresholds).critical if lv is not None else thresholds.critical

    return {
        ev.layer
        for f in findings
        if f.pattern is Pattern.RISING_TREND
        for ev in f.evidence
        if (ev.level or 0.0) >= critical(ev.layer)
    }
