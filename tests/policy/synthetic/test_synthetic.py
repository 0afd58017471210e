"""Tests for policy/synthetic/: exact log formats, counts, determinism, ranges and the planted signals."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fp8_policy.policy.synthetic import (
    PATTERNS,
    PLAN_ORDER,
    SCENARIOS,
    ProfileContext,
    Scenario,
    ScenarioCase,
    SyntheticRun,
    WrittenRun,
    everywhere,
    first_blocks,
    heads,
    healthy,
    last_blocks,
    level,
    ramp,
    scale_jumps,
    split_stat,
    stats_line,
    stats_matrix,
    step_at,
    with_values,
    write_run,
)

# Reference regexes, verbatim from fp8-log-format.md §1.2, §1.3 and §3.
STATS_LINE = re.compile(
    r"^(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3}) - (?P<level>[A-Z]+) - "
    r"(?P<name>.+?)\s+iteration=(?P<iteration>\d+)\s+value=(?P<value>[-+]?(?:\d+(?:\.\d+)?|nan|inf))\s*$"
)
META_ASSIGNED = re.compile(r"^(?P<ts>\S+ \S+) - (?P<level>[A-Z]+) - Assigned layer name: (?P<layer>.+?)\s*$")
META_PLAN = re.compile(
    r"^(?P<ts>\S+ \S+) - (?P<level>[A-Z]+) - LAYER=(?P<layer>.+?): Tensor: (?P<tensor>\w+), "
    r"gemm (?P<gemm>\w+) - (?P<plan>FP8 Quantize|Quantize|High Precision|modify_tensor\(\))\s*$"
)
META_FEATURE = re.compile(
    r"^(?P<ts>\S+ \S+) - (?P<level>[A-Z]+) - LAYER=(?P<layer>.+?): Feature=(?P<feature>\w+), "
    r"API=(?P<api>\w+)(?:, TENSOR=|: )(?P<tensor>\w+)"
)
PATH = re.compile(
    r"(?:^|/)(?:rank_(?P<dirrank>\d+)/)?(?P<kind>nvdlfw_inspect_logs|nvdlfw_inspect_statistics_logs)/"
    r"nvdlfw_inspect(?:_(?P<stamp>\d{8}_\d{6}))?_globalrank-(?P<rank>\d+)\.log$"
)
METRIC = re.compile(r"^(?P<layer>.+)_(?P<tensor>activation|gradient|weight|output|wgrad|dgrad)_(?P<stat>.+)$")
# Stricter than §1.2: the exact bytes of nvdlfw's template (one space, four TABs, one space).
EXACT_STATS = re.compile(
    r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3} - INFO - [^\s]+ \t\t\t\t "
    r"iteration=(\d{6,}) \t\t\t\t value=(-?\d+\.\d{4}|nan|-?inf)$"
)
META_HEADER = re.compile(
    r"^\S+ \S+ - INFO - (Default logging to file enabled at \S+|Reading config from \S+\.|"
    r"Loaded configs for \[('[\w]+'(, )?)+\]\.)$"
)
META_DISABLED = re.compile(r"^\S+ \S+ - INFO - LAYER=(?P<layer>.+?): (Quantization Disabled|FP8 Disabled)$")
FIXTURES = Path("/work/shared/fixtures/bionemo")


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _series(written: WrittenRun) -> dict[tuple[int, str], np.ndarray]:
    values: dict[tuple[int, str], list[float]] = defaultdict(list)
    for f in written.files:
        for line in _lines(f.stats_path):
            m = STATS_LINE.match(line)
            assert m, line
            values[(f.rank, m["name"])].append(float(m["value"]))
    return {key: np.array(v) for key, v in values.items()}


def _meta(written: WrittenRun, rank: int = 0) -> list[str]:
    return _lines(written.files[rank].metadata_path)


@pytest.fixture(scope="module")
def scenario_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, WrittenRun]:
    root = tmp_path_factory.mktemp("scenarios")
    return {name: write_run(case.run, root / name) for name, case in SCENARIOS.items()}


# ------------------------------------------------------------------------------------------------ line formats
@pytest.mark.parametrize(
    "run",
    [
        SyntheticRun(family="esm2", num_layers=3, iterations=30),
        SyntheticRun(
            family="llama",
            num_layers=2,
            iterations=20,
            extra_stats=("mxfp8_underflows%", "fp8_block_scaling_underflows%"),
        ),
        SyntheticRun(family="megatron", num_layers=2, iterations=20, extra_stats="overflows%"),
        SyntheticRun(family="gpt", num_layers=2, first_index=0, iterations=20, line_order="layer"),
    ],
    ids=["esm2", "llama", "megatron", "gpt"],
)
def test_stats_lines_match_reference_regexes_exactly(tmp_path: Path, run: SyntheticRun) -> None:
    written = write_run(run, tmp_path)
    lines = _lines(written.files[0].stats_path)
    assert lines
    for line in lines:
        m = STATS_LINE.match(line)
        assert m and EXACT_STATS.match(line), repr(line)
        assert m["level"] == "INFO" and METRIC.match(m["name"])
    assert written.files[0].stats_path.read_bytes().endswith(b"\n")


def test_iterations_are_zero_padded_to_six_digits_and_longer_when_needed(tmp_path: Path) -> None:
    run = SyntheticRun(num_layers=1, iterations=1_000_000, freq=250_000)
    written = write_run(run, tmp_path)
    seen = {EXACT_STATS.match(line)[1] for line in _lines(written.files[0].stats_path)}  # type: ignore[index]
    assert seen == {"000000", "250000", "500000", "750000", "1000000"}


def test_lines_equal_the_reference_formatter_including_nan_and_inf(tmp_path: Path) -> None:
    specials = {0: float("nan"), 10: float("inf"), 20: 1e-7, 30: 0.00005, 40: 0.00015, 50: 12.34565}
    run = SyntheticRun(num_layers=1, iterations=60, profile=with_values(level(1.0), specials))
    written = write_run(run, tmp_path)
    cycle, values = stats_matrix(run, 0)
    lines = _lines(written.files[0].stats_path)
    iterations = run.iteration_array()
    for k, line in enumerate(lines):
        j, s = divmod(k, len(cycle))
        layer, tensor, stat = cycle[s]
        expected = stats_line(line[:23], f"{layer}_{tensor}_{stat}", int(iterations[j]), float(values[s, j]))
        assert line == expected
    assert any(line.endswith("value=nan") for line in lines) and any(line.endswith("value=inf") for line in lines)
    assert stats_line("2026-01-01 00:00:00,000", "x_activation_min", 3, float("-inf")).endswith(
        "x_activation_min \t\t\t\t iteration=000003 \t\t\t\t value=-inf"
    )


def test_timestamps_are_asctime_and_never_go_back(tmp_path: Path) -> None:
    written = write_run(SyntheticRun(num_layers=2, iterations=50, ranks=2), tmp_path)
    for f in written.files:
        stamps = [line[:23] for line in _lines(f.metadata_path) + _lines(f.stats_path)]
        assert all(re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3}", s) for s in stamps)
        assert stamps == sorted(stamps)


# ------------------------------------------------------------------------------------------------ metadata
def _classify(line: str) -> str:
    for kind, rx in (
        ("header", META_HEADER),
        ("assigned", META_ASSIGNED),
        ("plan", META_PLAN),
        ("feature", META_FEATURE),
        ("disabled", META_DISABLED),
    ):
        if rx.match(line):
            return kind
    raise AssertionError(f"unrecognised metadata line: {line!r}")


@pytest.mark.parametrize("family", ["esm2", "llama", "megatron", "gpt"])
def test_metadata_lines_match_reference_regexes(tmp_path: Path, family: str) -> None:
    run = SyntheticRun(family=family, num_layers=3, iterations=10, first_index=0 if family == "gpt" else 1)
    lines = _meta(write_run(run, tmp_path))
    kinds = [_classify(line) for line in lines]
    assert kinds[:3] == ["header"] * 3 and "disabled" not in kinds
    assigned = [META_ASSIGNED.match(x)["layer"] for x in lines if META_ASSIGNED.match(x)]  # type: ignore[index]
    assert assigned == list(run.assigned_modules()) and assigned[0] == "model"
    plans = [META_PLAN.match(x) for x in lines if META_PLAN.match(x)]
    layers = [s.name for s in run.layers()]
    assert [p["layer"] for p in plans] == [name for name in layers for _ in PLAN_ORDER]  # type: ignore[index]
    assert [(p["tensor"], p["gemm"]) for p in plans] == list(PLAN_ORDER) * len(layers)  # type: ignore[index]
    assert {p["plan"] for p in plans} == {"Quantize"}  # type: ignore[index]
    if family in ("esm2", "llama"):  # LayerNormMLP is assigned as a whole, its GEMMs log as .fc1 / .fc2
        assert any(a.endswith(".layernorm_mlp") for a in assigned)
        assert not any(a.endswith((".fc1", ".fc2")) for a in assigned)
        assert any(p["layer"].endswith("layernorm_mlp.fc2") for p in plans)  # type: ignore[index]


def test_bf16_layers_are_high_precision_and_have_no_stats(tmp_path: Path) -> None:
    base = SyntheticRun(family="megatron", num_layers=4, iterations=20)
    bf16 = frozenset(base.block(3)) | {"model.module.output_layer"}
    run = SyntheticRun(family="megatron", num_layers=4, iterations=20, bf16_layers=bf16, disabled_via_feature=True)
    written = write_run(run, tmp_path)
    lines = _meta(written)
    for line in lines:
        plan, feature, disabled = META_PLAN.match(line), META_FEATURE.match(line), META_DISABLED.match(line)
        if plan:
            assert (plan["plan"] == "High Precision") == (plan["layer"] in bf16)
        if feature:
            assert feature["layer"] not in bf16
        if disabled:
            assert disabled[2] == "Quantization Disabled" and disabled["layer"] in bf16
    assert sum(bool(META_DISABLED.match(x)) for x in lines) == len(bf16)
    assert "['fp8_disabled_layers', 'fp8_stats_remaining_layers']" in lines[2]
    logged = {METRIC.match(name)["layer"] for _, name in _series(written)}  # type: ignore[index]
    assert logged == set(written.stats_layers) and not logged & bf16


def test_old_te_plan_word_and_disabled_message(tmp_path: Path) -> None:
    run = SyntheticRun(
        num_layers=1,
        iterations=0,
        te_plan_word="FP8 Quantize",
        disabled_via_feature=True,
        bf16_layers=frozenset({"model.lm_head.decoder"}),
    )
    plans = {m["plan"] for m in map(META_PLAN.match, _meta(write_run(run, tmp_path))) if m}
    assert plans == {"FP8 Quantize", "High Precision"}
    assert any(line.endswith("LAYER=model.lm_head.decoder: FP8 Disabled") for line in _meta(write_run(run, tmp_path)))


@pytest.mark.parametrize(
    ("fixture", "family", "num_layers", "heads"),
    [
        ("dummy_logs_esm2", "esm2", 6, ("model.lm_head.dense", "model.lm_head.decoder")),
        ("dummy_logs_llama3", "llama", 2, ("model.lm_head",)),
    ],
)
def test_metadata_and_line_order_match_the_real_bionemo_logs(
    tmp_path: Path, fixture: str, family: str, num_layers: int, heads: tuple[str, ...]
) -> None:
    real_dir = FIXTURES / fixture / "rank_0"
    if not real_dir.exists():
        pytest.skip("bionemo fixtures not available")
    real_meta = _lines(real_dir / "nvdlfw_inspect_logs" / "nvdlfw_inspect_globalrank-0.log")
    real_stats = _lines(real_dir / "nvdlfw_inspect_statistics_logs" / "nvdlfw_inspect_globalrank-0.log")
    run = SyntheticRun(family=family, num_layers=num_layers, te_plan_word="FP8 Quantize", bf16_layers=frozenset(heads))
    written = write_run(run, tmp_path)
    ours = [
        line[33:]
        for line in _meta(written)[3:]  # the bionemo config selected only layernorm_qkv
        if not (META_FEATURE.match(line) and "layernorm_qkv:" not in line)
    ]
    assert ours == [line[33:] for line in real_meta[3:]]
    real_cycle = [STATS_LINE.match(x)["name"] for x in real_stats if "iteration=000000" in x]  # type: ignore[index]
    assert [n for n in written.metric_names if "layernorm_qkv_" in n] == real_cycle


# ------------------------------------------------------------------------------------------------ counts, determinism
@pytest.mark.parametrize("with_rank_dirs", [True, False])
def test_returned_counts_equal_what_is_on_disk(tmp_path: Path, with_rank_dirs: bool) -> None:
    run = SyntheticRun(
        family="llama", num_layers=3, ranks=3, iterations=55, freq=5, bf16_layers=frozenset({"model.lm_head"})
    )
    written = write_run(run, tmp_path, with_rank_dirs=with_rank_dirs)
    series = _series(written)
    assert len(series) == written.expected_series == 3 * len(written.metric_names) == 3 * 3 * 4 * 3 * 4
    assert sum(len(v) for v in series.values()) == written.expected_points == 3 * 36 * 4 * 12
    for f in written.files:
        m = PATH.search(f.stats_path.as_posix())
        assert m and int(m["rank"]) == f.rank and m["kind"] == "nvdlfw_inspect_statistics_logs"
        assert (m["dirrank"] is not None) == with_rank_dirs
        assert PATH.search(f.metadata_path.as_posix())["kind"] == "nvdlfw_inspect_logs"  # type: ignore[index]
        assert f.stats_lines == len(_lines(f.stats_path)) == written.stats_lines_per_rank[f.rank]
        assert f.metadata_lines == len(_lines(f.metadata_path))
        assert f.stats_bytes == f.stats_path.stat().st_size
    assert written.total_bytes == sum(f.stats_bytes for f in written.files)


def test_same_seed_gives_same_bytes_and_another_seed_does_not(tmp_path: Path) -> None:
    case = SCENARIOS["rank_outlier"]
    a, b = write_run(case.run, tmp_path / "a"), write_run(case.run, tmp_path / "b")
    for fa, fb in zip(a.files, b.files, strict=True):
        assert fa.stats_path.read_bytes() == fb.stats_path.read_bytes()
        assert fa.metadata_path.read_bytes() == fb.metadata_path.read_bytes()
    c = write_run(replace(case.run, seed=999), tmp_path / "c")
    assert c.files[0].stats_path.read_bytes() != a.files[0].stats_path.read_bytes()


def test_values_are_clipped_to_their_valid_range(tmp_path: Path) -> None:
    profile = (
        Scenario()
        .plant(first_blocks(1), None, "underflows%", level(150.0))
        .plant(last_blocks(1), None, "underflows%", ramp(-10.0, 200.0))
        .plant(heads(), None, None, level(-5.0))
        .plant(everywhere(), "weight", "overflows%", step_at(10, -1.0, 101.0))
    )
    run = SyntheticRun(num_layers=3, iterations=30, extra_stats="overflows%", profile=profile)
    written = write_run(run, tmp_path)
    text = written.files[0].stats_path.read_text()
    assert "value=-" not in text
    for (_, name), values in _series(written).items():
        stat = split_stat(METRIC.match(name)["stat"])[1]  # type: ignore[index]
        assert values.min() >= 0.0
        if stat.endswith("%"):
            assert values.max() <= 100.0
    assert "value=100.0000" in text


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
