"""A mixed NVFP4 / MXFP8 / FP8 run judged by each layer's own bands in every view of the analysis: boundary, rank
outliers, overflow severity and scale-instability exactness. The run: an NVFP4 recipe (TE 2.20) whose blocks 5-8
trained in MXFP8 (plain names, E8M0 scale bytes) and blocks 9-11 in FP8 with per-tensor scales (plain names, linear
scales), blocks 0 and 12 in BF16. A value of 3 % is critical for an FP8 layer and healthy for an NVFP4 one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fp8_policy.policy.analysis import analyze
from fp8_policy.policy.analysis.findings import Pattern
from fp8_policy.policy.thresholds import Severity
from tests.policy.te_logs import LoggedLayer, e8m0_bytes, noisy, parse, write_tree

SUBS = ("self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2")
N = 40
METADATA = {"recipe": "NVFP4BlockScaling", "gpu": "B200", "te_version": "2.20.2"}
Levels = dict[tuple[str, str], np.ndarray]


def name(block: int, sub: str) -> str:
    return f"model.module.decoder.layers.{block}.{sub}"


def nvfp4(rng: np.random.Generator, level: float = 7.0) -> Levels:
    series: Levels = {}
    for tensor in ("activation", "gradient", "weight"):
        series[(tensor, "nvfp4_underflows%")] = noisy(level if tensor != "weight" else 10.3, N, rng)
    return series


def mxfp8(rng: np.random.Generator, underflow: float = 0.05) -> Levels:
    series: Levels = {}
    for tensor in ("activation", "gradient", "weight"):
        series[(tensor, "underflows%")] = noisy(underflow, N, rng)
        series[(tensor, "scale_inv_min")] = e8m0_bytes(N, rng, 112)
        series[(tensor, "scale_inv_max")] = e8m0_bytes(N, rng, 124)
    return series


def fp8(rng: np.random.Generator, underflow: float = 0.05) -> Levels:
    """Per-tensor scales: linear scale_inv (4 printed decimals), plain names."""
    series: Levels = {}
    for tensor in ("activation", "gradient", "weight"):
        series[(tensor, "underflows%")] = noisy(underflow, N, rng)
        series[(tensor, "scale_inv_min")] = noisy(0.0123, N, rng)
        series[(tensor, "scale_inv_max")] = noisy(0.0456, N, rng)
    return series


def write_run(root: Path, change=None, ranks: int = 1) -> Path:
    """Blocks 0 and 12 BF16, 1-4 NVFP4, 5-8 MXFP8, 9-11 FP8; `change(rank, block, sub, series)` edits a layer."""
    for rank in range(ranks):
        rng = np.random.default_rng(11 + rank)
        layers = []
        for block in range(13):
            for sub in SUBS:
                if block in (0, 12):
                    layers.append(LoggedLayer(name(block, sub), {}, quantized=False))
                    continue
                series = nvfp4(rng) if block <= 4 else mxfp8(rng) if block <= 8 else fp8(rng)
                if change is not None:
                    change(rank, block, sub, series)
                layers.append(LoggedLayer(name(block, sub), series))
        write_tree(root, layers, np.arange(N) * 10, rank=rank)
    return root


def ramp(start: float, end: float) -> np.ndarray:
    return np.round(np.linspace(start, end, N), 4)


def test_the_run_is_read_as_three_formats(tmp_path: Path) -> None:
    analysis = analyze(parse(write_run(tmp_path), METADATA))
    own = analysis.training.layer_recipes
    assert {own[name(b, s)] for b in range(5, 9) for s in SUBS} == {"mxfp8"}
    assert {own[name(b, s)] for b in range(9, 12) for s in SUBS} == {"current"}
    assert not any(name(b, s) in own for b in range(1, 5) for s in SUBS)
    assert set(analysis.patterns()) == {"healthy"}


def test_boundary_judges_an_fp8_layer_with_fp8_bands_and_fp8_peers(tmp_path: Path) -> None:
    """Block 11's fc2 next to BF16 block 12 rises to 3 %: under NVFP4's bands (warning 10 %) and against NVFP4
    peers at 7 % it would not stand out; it is an FP8 layer, and 3 % is critical there. Block 1's NVFP4 fc2 next to
    BF16 block 0 rises 6.5 -> 8 %: healthy in NVFP4's bands, never a boundary finding."""
    fc2 = "mlp.linear_fc2"

    def change(_rank: int, block: int, sub: str, series: Levels) -> None:
        if sub == fc2 and block == 11:
            series[("activation", "underflows%")] = ramp(0.5, 3.0)
        if sub == fc2 and block == 1:
            series[("activation", "nvfp4_underflows%")] = ramp(6.5, 8.0)

    analysis = analyze(parse(write_run(tmp_path, change), METADATA))
    boundary = [f for f in analysis.findings if f.pattern is Pattern.BOUNDARY]
    assert [f.layers for f in boundary] == [(name(11, fc2),)]
    assert boundary[0].severity is Severity.CRITICAL
    assert boundary[0].evidence[0].reference is not None and boundary[0].evidence[0].reference < 0.1  # FP8 peers


def test_rank_outliers_use_each_layers_own_bands(tmp_path: Path) -> None:
    """Rank 3 logs 1.5 % on every FP8 layer's activations and gradients (the others 0.05 %): an outlier under FP8's
    bands (warning 0.5 %), invisible under NVFP4's warning of 10 %."""

    def change(rank: int, block: int, _sub: str, series: Levels) -> None:
        if rank == 3 and block >= 9:
            for tensor in ("activation", "gradient"):
                series[(tensor, "underflows%")] = noisy(1.5, N, np.random.default_rng(block))

    analysis = analyze(parse(write_run(tmp_path, change, ranks=4), METADATA))
    outliers = [f for f in analysis.findings if f.pattern is Pattern.RANK_OUTLIER]
    assert len(outliers) == 1 and "rank 3" in outliers[0].summary
    assert outliers[0].severity is Severity.WARNING  # 1.5 % in FP8's bands
    assert set(outliers[0].layers) <= {name(b, s) for b in range(9, 12) for s in SUBS}


def test_overflow_severity_uses_the_layers_own_bands(tmp_path: Path) -> None:
    """A delayed-scaling block (bare overflows%) of the NVFP4 run overflows 3 %: critical in FP8's bands (it would
    be only the warning floor in NVFP4's)."""

    def change(_rank: int, block: int, _sub: str, series: Levels) -> None:
        if block == 10:
            series[("activation", "overflows%")] = np.full(N, 3.0)

    analysis = analyze(parse(write_run(tmp_path, change), METADATA))
    assert {analysis.training.layer_recipes[name(10, s)] for s in SUBS} == {"delayed"}
    overflow = [f for f in analysis.findings if f.pattern is Pattern.OVERFLOW]
    assert len(overflow) == 1 and overflow[0].severity is Severity.CRITICAL
    rows = {row.name: row for row in analysis.layers}
    verdicts = [v for v in rows[name(10, SUBS[0])].series if v.stat == "overflows%"]
    assert verdicts and verdicts[0].severity is Severity.CRITICAL  # the layer table says the same


def test_scale_jumps_are_exact_only_for_the_layers_logged_as_e8m0_bytes(tmp_path: Path) -> None:
    """MXFP8 block 6's activation scale swings byte 118 <-> 128 (2^10): jumps. FP8 block 10's printed scale_inv_min
    flips 0.0001 <-> 0.0009: within the print interval (each value +- 5e-5) the ratio is at most 6.3, no jump; read
    as exact powers (the run-wide flag before) it was 9x."""

    def change(_rank: int, block: int, sub: str, series: Levels) -> None:
        if sub != SUBS[0]:
            return
        if block == 6:
            series[("activation", "scale_inv_min")] = np.where(np.arange(N) % 2 == 0, 118.0, 128.0)
        if block == 10:
            series[("activation", "scale_inv_min")] = np.where(np.arange(N) % 2 == 0, 0.0001, 0.0009)

    analysis = analyze(parse(write_run(tmp_path, change), METADATA))
    assert name(6, SUBS[0]) in analysis.training.e8m0_layers
    assert name(10, SUBS[0]) not in analysis.training.e8m0_layers
    found = [f for f in analysis.findings if f.pattern is Pattern.SCALE_INSTABILITY]
    assert len(found) == 1 and found[0].layers == (name(6, SUBS[0]),)
    assert found[0].severity is Severity.CRITICAL


@pytest.mark.parametrize("level, fp8_band", [(1.0, Severity.WARNING), (5.0, Severity.SEVERE)])
def test_the_layer_table_and_findings_agree_per_format(tmp_path: Path, level: float, fp8_band: Severity) -> None:
    """The same level on an NVFP4 layer and on an FP8 layer: ok for the first, FP8's band for the second."""

    def change(_rank: int, block: int, sub: str, series: Levels) -> None:
        if sub == SUBS[2] and block == 3:
            series[("gradient", "nvfp4_underflows%")] = noisy(level, N, np.random.default_rng(3))
        if sub == SUBS[2] and block == 9:
            series[("gradient", "underflows%")] = noisy(level, N, np.random.default_rng(9))

    analysis = analyze(parse(write_run(tmp_path, change), METADATA))
    rows = {row.name: row for row in analysis.layers}
    assert rows[name(9, SUBS[2])].severity is fp8_band
    assert rows[name(3, SUBS[2])].severity is Severity.OK
    named = {n for f in analysis.findings if f.severity >= fp8_band for n in f.layers}
    assert name(9, SUBS[2]) in named and name(3, SUBS[2]) not in named
