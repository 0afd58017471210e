"""Tests for policy/synthetic/: the profiles the values are drawn from and the planted signal of every scenario
(a U shape, a boundary before a BF16 tail, a rising trend, a rank outlier, a uniform recipe problem)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fp8_policy.policy.synthetic import (
    PATTERNS,
    SCENARIOS,
    ProfileContext,
    ScenarioCase,
    SyntheticRun,
    WrittenRun,
    healthy,
    level,
    ramp,
    scale_jumps,
    split_stat,
    stats_matrix,
    step_at,
    with_values,
    write_run,
)
from tests.policy.synthetic.written_logs import METRIC, _series


@pytest.fixture(scope="module")
def scenario_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, WrittenRun]:
    root = tmp_path_factory.mktemp("scenarios")
    return {name: write_run(case.run, root / name) for name, case in SCENARIOS.items()}


# ------------------------------------------------------------------------------------------------ profiles
def _ctx(stat: str = "underflows%", tensor: str = "gradient", n: int = 11) -> ProfileContext:
    return ProfileContext("model.x.layers.1.fc1", "fc1", 1, 0, 4, tensor, stat, 0, np.arange(n) * 10, 7)


def test_profile_building_blocks() -> None:
    assert np.allclose(step_at(50, 1.0, 3.0)(_ctx()), [1.0] * 5 + [3.0] * 6)
    r = ramp(8.0, 18.0, noise=0.0)(_ctx())
    assert r[0] == pytest.approx(8.0) and r[-1] == pytest.approx(18.0) and np.all(np.diff(r) > 0)
    lv = level((3.0, 6.0), noise=0.0)(_ctx())
    assert 3.0 <= lv[0] <= 6.0 and np.all(lv == lv[0])
    jumps = scale_jumps(16.0, every=2)(_ctx("scale_inv_min", "activation"))
    assert jumps.max() / jumps.min() > 10
    patched = with_values(level(1.0), {20: float("nan")})(_ctx())
    assert np.isnan(patched[2]) and not np.isnan(patched[3])
    assert np.array_equal(level(1.0)(_ctx()), level(1.0)(_ctx()))  # seeded, not call-order dependent


def test_healthy_warmup_reproduces_iteration_zero_of_delayed_scaling() -> None:
    profile = healthy(warmup=True)
    assert profile(_ctx("scale_inv_max", "activation"))[0] == 1.0
    grad = profile(_ctx())
    assert grad[0] == pytest.approx(21.5) and grad[1:].max() < 0.5


def test_healthy_scale_inv_min_equals_max_for_per_tensor_recipes() -> None:
    run = SyntheticRun(num_layers=1, iterations=100)
    cycle, values = stats_matrix(run, 0)
    rows = {c: values[k] for k, c in enumerate(cycle)}
    for layer, tensor, stat in cycle:
        if stat == "scale_inv_min":
            assert np.array_equal(rows[(layer, tensor, "scale_inv_min")], rows[(layer, tensor, "scale_inv_max")])


# ------------------------------------------------------------------------------------------------ scenarios
def test_scenarios_cover_the_pattern_vocabulary() -> None:
    assert set(SCENARIOS) == set(PATTERNS)
    for name, case in SCENARIOS.items():
        assert case.truth.patterns == {name}
        assert case.truth.skip_layers <= {s.name for s in case.run.stats_layers()}
        assert {layer for layer, _, _ in case.truth.signals} <= {s.name for s in case.run.stats_layers()}
        assert bool(case.truth.signals) == (name != "healthy"), name


def _check_truth(case: ScenarioCase, series: dict[tuple[int, str], np.ndarray]) -> None:
    """Signal series exceed their thresholds; every other series looks healthy."""
    signals = {f"{layer}_{tensor}_{stat}" for layer, tensor, stat in case.truth.signals}
    outliers = case.truth.outlier_ranks
    for (rank, name), values in series.items():
        is_signal = name in signals and (not outliers or rank in outliers)
        stat = split_stat(METRIC.match(name)["stat"])[1]  # type: ignore[index]
        if stat == "underflows%":
            assert (values.max() > 2.0) if is_signal else (values.max() < 0.5), (name, rank, values.max())
        elif stat == "overflows%":
            assert (values.max() > 0.3) if is_signal else (values.max() == 0.0), (name, rank)
        elif stat.startswith("scale_inv") and values.min() > 0:
            ratio = values.max() / values.min()
            assert (ratio >= 8.0) if is_signal else (ratio < 4.0), (name, rank, ratio)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_scenario_contains_its_planted_signal(name: str, scenario_runs: dict[str, WrittenRun]) -> None:
    case, series = SCENARIOS[name], _series(scenario_runs[name])
    assert len(series) == scenario_runs[name].expected_series
    _check_truth(case, series)


def _grad_max(case: ScenarioCase, series: dict[tuple[int, str], np.ndarray], ordinal: int) -> float:
    return max(series[(0, f"{layer}_gradient_underflows%")].max() for layer in case.run.block(ordinal))


def test_u_shape_edges_are_high_and_middle_is_low(scenario_runs: dict[str, WrittenRun]) -> None:
    case = SCENARIOS["u_shape"]
    series = _series(scenario_runs["u_shape"])
    n = case.run.num_layers
    assert all(_grad_max(case, series, o) > 2.0 for o in (0, 1, 2, n - 3, n - 2, n - 1))
    assert all(_grad_max(case, series, o) < 0.5 for o in range(3, n - 3))
    assert len(case.truth.skip_layers) == 6 * 4


def test_boundary_grows_before_a_bf16_tail(scenario_runs: dict[str, WrittenRun]) -> None:
    case, written = SCENARIOS["boundary"], scenario_runs["boundary"]
    (layer,) = case.truth.skip_layers
    values = _series(written)[(0, f"{layer}_activation_underflows%")]
    assert 6.5 < values[:3].mean() < 9.5 and 15.0 < values[-3:].mean() < 21.0
    assert layer in case.run.block(8) and layer.endswith("linear_fc2")
    tail = set(case.run.block(9)) | set(case.run.block(11)) | {"model.module.output_layer"}
    assert tail <= case.run.bf16_layers and not tail & set(written.stats_layers)


def test_rising_trend_rises(scenario_runs: dict[str, WrittenRun]) -> None:
    series = _series(scenario_runs["rising_trend"])
    for layer, tensor, stat in SCENARIOS["rising_trend"].truth.signals:
        values = series[(0, f"{layer}_{tensor}_{stat}")]
        quarter = len(values) // 4
        assert values[-quarter:].mean() > 4 * values[:quarter].mean()


def test_rank_outlier_is_only_on_its_rank(scenario_runs: dict[str, WrittenRun]) -> None:
    case = SCENARIOS["rank_outlier"]
    assert case.truth.outlier_ranks == {2} and not case.truth.skip_layers and case.run.ranks == 4
    series = _series(scenario_runs["rank_outlier"])
    grads = {(r, n): v.max() for (r, n), v in series.items() if n.endswith("_gradient_underflows%")}
    assert min(v for (r, _), v in grads.items() if r == 2) > 2.0
    assert max(v for (r, _), v in grads.items() if r != 2) < 0.5


def test_uniform_asks_for_a_recipe_change(scenario_runs: dict[str, WrittenRun]) -> None:
    case = SCENARIOS["uniform"]
    assert case.truth.recipe_change and not case.truth.skip_layers
    series = _series(scenario_runs["uniform"])
    mx = [v.max() for (_, n), v in series.items() if n.endswith("_gradient_mxfp8_underflows%")]
    assert mx and max(mx) < 0.5


def test_small_benchmark_tree_and_baseline_parse(tmp_path: Path) -> None:
    from bench.baseline import baseline_parse
    from bench.generate import benchmark_case

    case = benchmark_case("small")
    written = write_run(case.run, tmp_path)
    df, pivot = baseline_parse(written.files[0].stats_path)
    assert len(df) == written.expected_points
    assert pivot.shape == (len(written.stats_layers), written.num_iterations)
    worst = pivot.max(axis=1)
    assert set(worst[worst > 2.0].index) == case.truth.skip_layers
    assert {"model.lm_head.dense", "model.lm_head.decoder"} <= case.truth.skip_layers
