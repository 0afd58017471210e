"""Synthetic loss-sensitivity statistics (policy/synthetic/sensitivity.py): the lines parse and ingest with nothing
skipped, the values land per layer x format x GEMM, follow the planted problems, and the option is checked."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bench.eval_ingest import MAX_LINE_BYTES, log_files, run_data
from fp8_policy.policy.sensitivity import Sensitivity, read_sensitivity
from fp8_policy.policy.synthetic import (
    Rule,
    Scenario,
    SyntheticRun,
    WrittenRun,
    any_of,
    everywhere,
    first_blocks,
    heads,
    level,
    make_case,
    step_at,
    write_run,
)
from fp8_policy.service.ingest.parse import parse_files
from tests.policy.synthetic.written_logs import METRIC, STATS_LINE, _lines, _series

FORMATS = ("nvfp4", "mxfp8", "current", "delayed", "block")
PREFIXES = {"nvfp4", "mxfp8", "fp8_current_scaling", "fp8_delayed_scaling", "fp8_block_scaling"}


def _case(tmp_path: Path, **run: object) -> tuple[WrittenRun, frozenset[str]]:
    """An ESM2-shaped run with gradient underflow 4-6 % planted in the first block and both heads."""
    base = {"family": "esm2", "num_layers": 4, "iterations": 60, "freq": 2, "ranks": 2, "seed": 7}
    rules = [Rule(any_of(first_blocks(1), heads()), level((4.0, 6.0)), "gradient", "underflows%")]
    case = make_case("sens", "planted", SyntheticRun(**{**base, **run}), rules, {"u_shape"})  # type: ignore[arg-type]
    return write_run(case.run, tmp_path), frozenset(case.truth.skip_layers)


def test_lines_parse_and_follow_each_steps_statistics_at_the_sensitivity_frequency(tmp_path: Path) -> None:
    written, _ = _case(tmp_path, sensitivity=FORMATS, sensitivity_freq=10)
    assert len(written.sensitivity_names) == 18 * 5 * 3 and written.sensitivity_steps == 7  # 0, 10, ..., 60
    for name in written.sensitivity_names:
        m = METRIC.match(name)
        assert m and m["tensor"] in ("output", "dgrad", "wgrad") and m["layer"] in written.stats_layers
        assert m["stat"].removesuffix("_sensitivity") in PREFIXES
    for f in written.files:
        steps: dict[int, list[str]] = defaultdict(list)
        for line in _lines(f.stats_path):
            m = STATS_LINE.match(line)
            assert m, line
            steps[int(m["iteration"])].append(m["name"])
        for iteration, names in steps.items():  # a step's statistics, then its sensitivity lines
            extra = list(written.sensitivity_names) if iteration % 10 == 0 else []
            assert names == [*written.metric_names, *extra], iteration
        assert f.stats_lines == sum(map(len, steps.values())) == written.expected_points // 2
    meta = _lines(written.files[0].metadata_path)
    announced = [x for x in meta if "Feature=LogQuantizationSensitivity, API=inspect_tensor: output" in x]
    assert len(announced) == len(written.stats_layers)


def test_the_run_ingests_with_nothing_skipped_and_the_planted_layers_are_the_sensitive_ones(tmp_path: Path) -> None:
    written, planted = _case(tmp_path, sensitivity=FORMATS, sensitivity_freq=10)
    assembled, counts = parse_files(log_files(tmp_path), max_line_bytes=MAX_LINE_BYTES, threads=1)
    assert counts.lines_skipped == 0 and assembled.points == written.expected_points
    assert assembled.unsplit_names == []
    table = read_sensitivity(run_data(assembled))
    assert set(table.layers()) == set(written.stats_layers)
    for layer in table.layers():
        assert set(table.values[layer]) == set(FORMATS)
        assert all(set(gemms) == {"fprop", "dgrad", "wgrad"} for gemms in table.values[layer].values())
        risks = {p: table.risk(layer, p) for p in FORMATS}
        assert all(r is not None and math.isfinite(r) and r > 0 for r in risks.values())
        assert risks["nvfp4"] > 5 * max(risks[p] for p in FORMATS if p != "nvfp4")  # 4-bit is far riskier
    assert planted and planted < set(table.layers())
    for fmt in FORMATS:
        for gemm in ("dgrad", "wgrad"):  # the GEMMs the planted gradient feeds
            hot = min(_gemm(table, layer, fmt, gemm) for layer in planted)
            cool = max(_gemm(table, layer, fmt, gemm) for layer in set(table.layers()) - planted)
            assert hot > 2 * cool, (fmt, gemm)
        # fprop is fed by activation and weight, healthy in every layer: no such separation
        assert max(_gemm(table, layer, fmt, "fprop") for layer in planted) < 4 * min(
            _gemm(table, layer, fmt, "fprop") for layer in table.layers()
        )


def _gemm(table: Sensitivity, layer: str, fmt: str, gemm: str) -> float:
    value = table.gemm(layer, fmt, gemm)
    assert value is not None
    return float(value)


def test_values_are_deterministic_per_rank_and_follow_a_problem_that_starts_mid_run(tmp_path: Path) -> None:
    a, _ = _case(tmp_path / "a", sensitivity=("mxfp8",))
    b, _ = _case(tmp_path / "b", sensitivity=("mxfp8",))
    assert a.files[0].stats_path.read_bytes() == b.files[0].stats_path.read_bytes()
    assert a.sensitivity_steps == a.num_iterations  # default: every logged iteration
    name = "model.esm.encoder.layers.2.self_attention.proj_dgrad_mxfp8_sensitivity"
    series = _series(a)
    assert not np.array_equal(series[(0, name)], series[(1, name)])  # each rank its own micro-batches
    late = SyntheticRun(num_layers=2, iterations=60, freq=2, sensitivity=("mxfp8",), sensitivity_freq=20)
    late = replace(late, profile=Scenario().plant(everywhere(), "gradient", "underflows%", step_at(30, 0.1, 8.0)))
    values = _series(write_run(late, tmp_path / "late"))[(0, name)]
    assert len(values) == 4 and max(values[:2]) * 4 < min(values[2:])  # iterations 0, 20 | 40, 60


def test_without_the_option_nothing_changes_and_bad_options_are_refused(tmp_path: Path) -> None:
    plain, _ = _case(tmp_path / "plain")
    assert plain.sensitivity_names == () and plain.sensitivity_steps == 0
    assert not any(n.endswith("_sensitivity") for _, n in _series(plain))
    assert "LogQuantizationSensitivity" not in plain.files[0].metadata_path.read_text()
    assert SyntheticRun(sensitivity="nvfp4").sensitivity == ("nvfp4",)
    with pytest.raises(ValueError, match="sensitivity formats"):
        SyntheticRun(sensitivity=("fp16",))
    with pytest.raises(ValueError, match="sensitivity formats"):
        SyntheticRun(sensitivity=("mxfp8", "mxfp8"))
    with pytest.raises(ValueError, match="sensitivity_freq"):
        SyntheticRun(freq=10, sensitivity=("mxfp8",), sensitivity_freq=25)
