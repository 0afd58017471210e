"""rising_trend: projected and late-onset trends, and the HuberRegressor fit against plain least squares."""

from __future__ import annotations

import numpy as np
import pytest

from fp8_policy.policy.analysis import Pattern, Severity, Thresholds, analyze
from fp8_policy.policy.analysis.signals import extract_signals
from fp8_policy.policy.analysis.trends import fit_window, robust_trend
from tests.policy.analysis.factories import Spec, build_run, name, plant, ramp

LAYER = name("megatron", 6, "fc1")


def trend_run(curve, n_points: int = 400, noise: float = 0.03):
    return build_run(plant(Spec(n_blocks=12, n_points=n_points, noise=noise), [LAYER], "gradient", curve))


def test_projected_trend_below_critical_today() -> None:
    analysis = analyze(trend_run(ramp(0.2, 1.6)))
    assert analysis.patterns() == {"rising_trend"}
    finding = analysis.by_pattern(Pattern.RISING_TREND)[0]
    ev = finding.evidence[0]
    assert finding.layers == (LAYER,) and finding.severity is Severity.WARNING
    assert ev.level < 2.0 <= ev.projected_value
    assert ev.slope_per_1k > 0 and ev.crossing_iteration > ev.window[1]
    assert ev.projected_iteration > ev.window[1] and ev.onset is not None
    assert "projected to cross" in finding.summary


def test_shorter_horizon_drops_the_projection() -> None:
    run = trend_run(ramp(0.2, 1.6))
    assert "rising_trend" not in analyze(run, Thresholds(trend_horizon=0.1)).patterns()


def test_flat_layer_is_no_trend() -> None:
    assert analyze(trend_run(1.2)).patterns() == {"warning_band"}  # flat at 1.2 %: warning band, no trend


def test_late_onset_crossing_is_a_rising_trend_not_an_isolated_failure() -> None:
    analysis = analyze(trend_run(ramp(0.2, 8.0), n_points=41))
    assert analysis.patterns() == {"rising_trend"}
    finding = analysis.findings[0]
    assert finding.severity is Severity.SEVERE and finding.layers == (LAYER,)
    ev = finding.evidence[0]
    assert ev.start_level < 2.0 <= ev.level and ev.window[0] < ev.crossing_iteration < ev.window[1]
    assert "crossed 2% during the run" in finding.summary


def test_layer_failing_from_the_start_has_no_late_onset() -> None:
    analysis = analyze(trend_run(5.0, n_points=41))
    assert analysis.patterns() == {"single_tensor"}


def spiky_rise() -> np.ndarray:
    """A genuine but slow rise (0.6 -> 1.2 %) with four 15 % spikes at the very end."""
    values = np.linspace(0.6, 1.2, 400)
    values[[392, 395, 397, 399]] = 15.0
    return values


def naive_ols(summary, thresholds: Thresholds) -> tuple[float, float]:
    """The naive method on the same window: least-squares projection and the t-value of its slope."""
    it, values = fit_window(summary, thresholds.trend_fit_fraction, thresholds.min_points)
    x = (it - it[-1]) / 1000.0
    slope, intercept = np.polyfit(x, values, 1)
    residuals = values - (slope * x + intercept)
    error = np.sqrt((residuals**2).sum() / (x.size - 2)) / np.sqrt(((x - x.mean()) ** 2).sum())
    ahead = thresholds.trend_horizon * (summary.iterations[-1] - summary.iterations[0]) / 1000.0
    return float(intercept + slope * ahead), float(slope / error)


def test_huber_ignores_late_spikes_where_least_squares_projects_a_false_crossing() -> None:
    thresholds = Thresholds(trend_horizon=0.5, trend_min_t=3.0)
    run = trend_run(spiky_rise(), noise=0.01)
    summary = extract_signals(run, thresholds).worst(LAYER, "gradient")
    assert summary is not None and summary.level < thresholds.critical  # the spikes do not move the level

    projected, t_value = naive_ols(summary, thresholds)
    assert projected >= thresholds.critical and t_value >= thresholds.trend_min_t  # OLS: a rising_trend

    fit = robust_trend(summary, thresholds)
    assert fit.projected_value < thresholds.critical
    assert "rising_trend" not in analyze(run, thresholds).patterns()


def test_huber_finds_a_rise_that_late_dropouts_hide_from_least_squares() -> None:
    values = np.linspace(0.3, 1.5, 400)
    values[[390, 393, 396, 399]] = 0.0  # logging dropouts printed as 0.0000 at the very end
    thresholds = Thresholds(trend_horizon=0.5)
    run = trend_run(values, noise=0.01)
    summary = extract_signals(run, thresholds).worst(LAYER, "gradient")
    assert summary is not None
    projected, _ = naive_ols(summary, thresholds)
    assert projected < thresholds.critical  # OLS: no crossing
    assert robust_trend(summary, thresholds).projected_value >= thresholds.critical
    assert "rising_trend" in analyze(run, thresholds).patterns()


def test_trend_fits_are_capped() -> None:
    layers = [name("megatron", b, "fc1") for b in range(12)]
    spec = plant(Spec(n_blocks=12, n_points=200, noise=0.02), layers, "gradient", ramp(0.2, 1.6))
    capped = analyze(build_run(spec), Thresholds(trend_max_candidates=3))
    assert len(capped.by_pattern(Pattern.RISING_TREND)[0].evidence) == 3


@pytest.mark.parametrize("seed", range(8))
def test_noise_on_a_flat_warning_level_is_not_a_trend(seed: int) -> None:
    layers = [name("megatron", b, s) for b in range(12) for s in ("qkv", "fc1")]
    spec = plant(Spec(n_blocks=12, seed=seed, noise=0.25), layers, "gradient", 1.2)  # short, noisy, flat
    assert "rising_trend" not in analyze(build_run(spec)).patterns()
