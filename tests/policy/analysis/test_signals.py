"""Signal extraction: warm-up, windows, levels, non-finite values, onset, recipe prefixes."""

from __future__ import annotations

import numpy as np

from fp8_policy.policy.analysis import Severity, Thresholds, analyze
from fp8_policy.policy.analysis.signals import extract_signals, onset
from fp8_policy.policy.records import MetricName, RunData, Series
from tests.policy.analysis.factories import Spec, build_run, name


def _single(
    values: np.ndarray,
    *,
    stat: str = "underflows%",
    tensor: str = "gradient",
    step: int = 10,
    extra: list[Series] | None = None,
) -> RunData:
    spec = Spec(n_blocks=1, with_heads=False)
    run = build_run(spec)
    layer = name("megatron", 0, "qkv")
    iterations = np.arange(values.size, dtype=np.int64) * step
    run.series = [
        s for s in run.series if not (s.metric.layer == layer and s.metric.tensor == tensor and s.metric.stat == stat)
    ]
    run.series.append(Series(0, MetricName(layer, tensor, stat), iterations, values))
    run.series += extra or []
    return run


def test_warmup_point_at_iteration_zero_does_not_make_every_layer_severe() -> None:
    run = build_run(Spec(n_blocks=6, noise=0.1))  # 21.4681 % gradient underflow at iteration 0 everywhere
    analysis = analyze(run)
    assert analysis.patterns() == {"healthy"}
    assert all(row.severity <= Severity.WARNING for row in analysis.layers)
    row = analysis.layer(name("megatron", 0, "qkv"))
    assert row.underflows["gradient"].max < 1.0  # 21.47 left out, not just averaged away


def test_scale_rule_alone_removes_the_delayed_scaling_warmup() -> None:
    # No fraction-based warm-up: only "scale_inv still exactly 1.0" identifies iteration 0 as warm-up.
    analysis = analyze(build_run(Spec(n_blocks=6, noise=0.1)), Thresholds(warmup_fraction=0.0))
    assert analysis.patterns() == {"healthy"}
    signals = extract_signals(build_run(Spec(n_blocks=1, noise=0.1)), Thresholds(warmup_fraction=0.0))
    summary = signals.worst(name("megatron", 0, "qkv"), "gradient")
    assert summary is not None and summary.window[0] == 10


def test_without_any_warmup_rule_the_first_point_counts() -> None:
    values = np.full(60, 0.1)
    values[0] = 21.4681  # no scale_inv series for this rank/layer/tensor: only the fraction rule could drop it
    run = _single(values)
    run.series = [s for s in run.series if not s.metric.stat.startswith("scale_inv")]
    kept = extract_signals(run, Thresholds(warmup_fraction=0.0)).worst(name("megatron", 0, "qkv"), "gradient")
    dropped = extract_signals(run, Thresholds()).worst(name("megatron", 0, "qkv"), "gradient")
    assert kept is not None and kept.max == 21.4681
    assert dropped is not None and dropped.max == 0.1


def test_scale_stuck_at_one_is_warmup_however_long() -> None:
    scale = np.full(60, 1.0)
    scale[50:] = 0.0004  # scale left 1.0 only at iteration 500
    layer = name("megatron", 0, "qkv")
    run = build_run(Spec(n_blocks=1, with_heads=False, scale_curves={(layer, "gradient"): scale}))
    summary = extract_signals(run, Thresholds()).worst(layer, "gradient")
    assert summary is not None and summary.window == (500, 590)


def test_a_run_of_warmup_points_only_is_not_assessed() -> None:
    analysis = analyze(build_run(Spec(n_blocks=4, n_points=1)))  # iteration 0 only: 21.47 %, scale_inv 1.0
    assert (
        analysis.patterns() == {"unassessed"} and analysis.findings[0].severity is Severity.OK
    )  # no verdict, not healthy
    assert "not called healthy" in analysis.findings[0].summary
    assert analysis.stats["warmup_only_series"] > 0
    assert any("no point after warm-up" in note for note in analysis.notes)


def test_level_is_a_robust_trailing_quantile_not_the_max() -> None:
    values = np.full(400, 0.3)
    values[[330, 360, 390]] = 9.0  # three spikes in the trailing window of 100 points
    summary = extract_signals(_single(values), Thresholds()).worst(name("megatron", 0, "qkv"), "gradient")
    assert summary is not None
    assert summary.max == 9.0 and summary.level == 0.3
    # warm-up cut 5% of 0..3990 -> first kept 200; trailing 25% of 200..3990 starts at 3042.5 -> 3050
    assert summary.window == (200, 3990) and summary.level_window == (3050, 3990)
    sustained = values.copy()
    sustained[300:] = 2.6
    summary = extract_signals(_single(sustained), Thresholds()).worst(name("megatron", 0, "qkv"), "gradient")
    assert summary is not None and summary.level >= 2.6


def test_max_threshold_quantile_uses_the_window_max() -> None:
    values = np.full(400, 0.3)
    values[390] = 9.0
    summary = extract_signals(_single(values), Thresholds(level_quantile=1.0)).worst(
        name("megatron", 0, "qkv"), "gradient"
    )
    assert summary is not None and summary.level == 9.0


def test_nonfinite_points_are_counted_and_left_out() -> None:
    values = np.full(60, 0.2)
    values[[10, 20]] = np.nan
    values[30] = np.inf
    summary = extract_signals(_single(values), Thresholds()).worst(name("megatron", 0, "qkv"), "gradient")
    assert summary is not None
    assert summary.n_nonfinite == 3 and summary.max == 0.2 and np.isfinite(summary.mean)
    assert analyze(_single(values)).stats["nonfinite_points"] == 3


def test_onset_needs_a_sustained_crossing() -> None:
    values = np.full(300, 0.1)
    values[50] = 5.0  # lone spike
    values[200:] = 1.0  # sustained from iteration 2000
    summary = extract_signals(_single(values), Thresholds()).worst(name("megatron", 0, "qkv"), "gradient")
    assert summary is not None
    assert onset(summary, 0.5) == 2000
    assert onset(summary, 3.0) is None


def test_slope_is_the_robust_median_of_thirds() -> None:
    values = np.linspace(0.0, 3.0, 301)  # +1 % per 1000 iterations at step 10
    summary = extract_signals(_single(values), Thresholds(warmup_fraction=0.0)).worst(
        name("megatron", 0, "qkv"), "gradient"
    )
    assert summary is not None and abs(summary.slope_per_1k - 1.0) < 0.02


def test_training_recipe_prefix_counts_as_the_bare_stat() -> None:
    spec = Spec(n_blocks=1, with_heads=False)
    run = build_run(spec)
    layer = name("megatron", 0, "qkv")
    run.series = [s for s in run.series if s.metric.stat != "underflows%"]
    iterations = np.arange(60, dtype=np.int64) * 10
    run.series.append(
        Series(0, MetricName(layer, "gradient", "underflows%", "fp8_current_scaling"), iterations, np.full(60, 3.0))
    )
    run.metadata["recipe"] = "Float8CurrentScaling"
    summary = extract_signals(run, Thresholds()).worst(layer, "gradient")
    assert summary is not None and summary.level == 3.0
    run.metadata["recipe"] = "delayed"
    assert extract_signals(run, Thresholds()).worst(layer, "gradient") is None
