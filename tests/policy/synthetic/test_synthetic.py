"""Tests for policy/synthetic/: exact log formats, counts, determinism and ranges (the profiles and the planted
signals: test_planted_signals.py)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from fp8_policy.policy.synthetic import (
    PLAN_ORDER,
    SCENARIOS,
    Scenario,
    SyntheticRun,
    WrittenRun,
    everywhere,
    first_blocks,
    heads,
    last_blocks,
    level,
    ramp,
    split_stat,
    stats_line,
    stats_matrix,
    step_at,
    with_values,
    write_run,
)
from tests.policy.synthetic.written_logs import METRIC, STATS_LINE, _lines, _series

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


def _meta(written: WrittenRun, rank: int = 0) -> list[str]:
    return _lines(written.files[rank].metadata_path)


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
