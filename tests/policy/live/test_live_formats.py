"""Live events read each series in its own format, as the batch analysis does: bands of the format the series
measures (policy/analysis/format_bands.py) and MXFP8's E8M0 scale bytes as powers of two (policy/live/scales.py).
The batched detectors (live_batch) and the per-series reference (live_events.advance) agree, and both agree with
the batch analysis on the same series."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fp8_policy.policy.analysis import analyze
from fp8_policy.policy.analysis.findings import Pattern
from fp8_policy.policy.analysis.format_bands import SeriesBands
from fp8_policy.policy.live.batch import advance_piece
from fp8_policy.policy.live.events import SeriesState, advance
from fp8_policy.policy.live.table import SeriesTable
from fp8_policy.policy.names import split_metric_name
from fp8_policy.policy.thresholds import Thresholds
from tests.policy.te_logs import LoggedLayer, e8m0_bytes, noisy, parse, write_tree

T = Thresholds()
LAYER = "model.module.decoder.layers.3.mlp.linear_fc1"
N = 60
ITS = np.arange(N, dtype=np.int64) * 10


def live(metadata: dict, series: dict[str, np.ndarray]) -> tuple[list, list]:
    """(batched events, per-series events) of one rank's piece holding `series` (stat key -> values)."""
    bands = SeriesBands.from_metadata(T, metadata)
    names = [f"{LAYER}_activation_{key}" for key in series]
    values = np.concatenate(list(series.values()))
    offsets = np.arange(len(series) + 1) * N
    table = SeriesTable()
    batched = advance_piece(table, 0, names, offsets, np.tile(ITS, len(series)), values, T, bands=bands)
    reference = []
    for name, vals in zip(names, series.values(), strict=True):
        metric = split_metric_name(name)
        assert metric is not None
        reference += advance(SeriesState(), metric, 0, ITS, vals, bands.of(metric), scale_form=bands.scale_form(metric))
    return batched, reference


def _key(event) -> tuple:
    return (event.kind, event.stat, event.iteration, event.severity)


def swings(low: float, high: float, at: tuple[int, ...]) -> np.ndarray:
    """Bytes at `low`, moving to `high` and back at the points `at` (past the batch's 5 % warm-up)."""
    values = np.full(N, low)
    for k, start in enumerate(at):
        values[start:] = high if k % 2 == 0 else low
    return values


def batch_jumps(tmp_path: Path, metadata: dict, scale: np.ndarray) -> tuple[int, int | None]:
    """(jumps, first jump iteration) the batch analysis finds in the layer's scale_inv_min."""
    rng = np.random.default_rng(0)
    series = {
        ("activation", "underflows%"): noisy(0.05, N, rng),
        ("activation", "scale_inv_min"): scale,
        ("activation", "scale_inv_max"): e8m0_bytes(N, rng, 130),
    }
    write_tree(tmp_path, [LoggedLayer(LAYER, series)], ITS)
    analysis = analyze(parse(tmp_path, metadata))
    found = [
        ev
        for f in analysis.findings
        if f.pattern is Pattern.SCALE_INSTABILITY
        for ev in f.evidence
        if ev.stat == "scale_inv_min"
    ]
    return (found[0].count or 0, found[0].onset) if found else (0, None)


@pytest.mark.parametrize("metadata", [{"recipe": "MXFP8BlockScaling"}, {}], ids=["recipe given", "recipe inferred"])
@pytest.mark.parametrize(
    "low, high, jumps", [(118.0, 128.0, 3), (127.0, 128.0, 0), (120.0, 122.0, 0), (110.0, 125.0, 3)]
)
def test_live_and_batch_read_e8m0_bytes_alike(
    tmp_path: Path, metadata: dict, low: float, high: float, jumps: int
) -> None:
    """118 -> 128 is a factor 2^10: three swings are three jumps in both paths; 127 -> 128 (2x) and 120 -> 122
    (4x) are below the 8x factor in both, though the printed numbers differ by under 8 % either way."""
    scale = swings(low, high, (20, 35, 50))
    count, first = batch_jumps(tmp_path, metadata, scale)
    batched, reference = live(metadata, {"scale_inv_min": scale})
    assert [_key(e) for e in batched] == [_key(e) for e in reference]
    live_jumps = [e for e in batched if e.kind in ("scale_inv_rise", "scale_inv_drop")]
    assert count == len(live_jumps) == jumps
    if jumps:
        assert first == live_jumps[0].iteration == int(ITS[20])
        assert live_jumps[0].kind == "scale_inv_rise" and live_jumps[0].detail["ratio"] == pytest.approx(
            2.0 ** (high - low)
        )


def test_impossible_bytes_raise_nothing_and_linear_scales_stay_linear() -> None:
    """Byte 0 (padding) and 255 (NaN) are left out, not read as a collapse or a NaN; a per-tensor (linear) series
    of an MXFP8 run is read as linear, and its 0.01 -> 0.1 step is a jump."""
    scale = np.full(N, 120.0)
    scale[[25, 40]] = (0.0, 255.0)
    batched, reference = live({"recipe": "mxfp8"}, {"scale_inv_min": scale})
    assert batched == [] and reference == []
    linear = np.where(np.arange(N) < 30, 0.01, 0.1)
    batched, reference = live({"recipe": "mxfp8"}, {"scale_inv_max": linear})
    assert [e.kind for e in batched] == ["scale_inv_rise"] == [e.kind for e in reference]


@pytest.mark.parametrize(
    "metadata, key, level, band",
    [
        ({"recipe": "NVFP4BlockScaling"}, "nvfp4_underflows%", 7.0, None),  # healthy NVFP4
        ({"recipe": "NVFP4BlockScaling"}, "nvfp4_underflows%", 14.0, "critical"),  # NVFP4's critical 13 %
        ({"recipe": "NVFP4BlockScaling"}, "underflows%", 3.0, "critical"),  # an FP8 layer of the NVFP4 run
        ({"recipe": "mxfp8"}, "underflows%", 3.0, "critical"),
        ({"recipe": "mxfp8", "layer_recipes": {"*.layers.3.*": "nvfp4"}}, "underflows%", 3.0, None),  # stated NVFP4
        ({"recipe": "mxfp8"}, "nvfp4_underflows%", 7.0, None),  # an NVFP4 what-if judged as NVFP4
    ],
)
def test_band_crossings_use_the_bands_of_the_series_format(metadata: dict, key: str, level: float, band) -> None:
    values = np.round(np.full(N, level), 4)
    batched, reference = live(metadata, {key: values})
    assert [_key(e) for e in batched] == [_key(e) for e in reference]
    crossings = [e.detail["band"] for e in batched if e.kind == "band_crossing"]
    assert (crossings[-1] if crossings else None) == band


def test_a_projection_aims_at_the_series_own_critical_bound() -> None:
    """An NVFP4 series rising 6 -> 11 % is projected to NVFP4's critical 13 %, not reported past FP8's 2 %."""
    rising = np.round(np.linspace(6.0, 11.0, N), 4)
    batched, reference = live({"recipe": "nvfp4"}, {"nvfp4_underflows%": rising})
    assert [_key(e) for e in batched] == [_key(e) for e in reference]
    kinds = [e.kind for e in batched]
    assert "projected_crossing" in kinds
    projected = next(e for e in batched if e.kind == "projected_crossing")
    assert "reaching 13 %" in projected.message or "reach 13 %" in projected.message
    assert [e.detail["band"] for e in batched if e.kind == "band_crossing"] == ["warning"]
