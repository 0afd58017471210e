"""policy.live.events.advance is vectorised; here the per-point loop it replaced is kept as the reference, and both
must raise the same events and leave the same state on random increments (repeats, out-of-order points, NaN/inf,
band walks, scale jumps), and the vectorised one must be fast enough for live ingest at 1M lines/s."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from fp8_policy.policy.analysis.format_bands import E8M0, LINEAR, UNDECIDED
from fp8_policy.policy.live.events import (
    DEFAULT_HORIZON_STEPS,
    WINDOW,
    LiveEvent,
    SeriesState,
    _band_floor,
    _event,
    _fmt,
    _is_scale_inv,
    _is_underflow,
    _projection,
    advance,
)
from fp8_policy.policy.records import MetricName
from fp8_policy.policy.thresholds import Severity, Thresholds

T = Thresholds()
POINTS = T.min_points  # a band crossing's level: the median of this many recent points
UF = MetricName("model.layers.3.mlp.fc2", "gradient", "underflows%")
SCALE = MetricName("model.layers.3.mlp.fc2", "activation", "scale_inv_min")
OTHER = MetricName("model.layers.3.mlp.fc2", "activation", "overflows%")


def advance_per_point(
    state: SeriesState,
    metric: MetricName,
    rank: int,
    iterations: np.ndarray,
    values: np.ndarray,
    thresholds: Thresholds,
    horizon_steps: int = DEFAULT_HORIZON_STEPS,
) -> list[LiveEvent]:
    """The detectors as they were written first: one point at a time (the reference)."""
    events: list[LiveEvent] = []
    name = f"{metric.layer} {metric.tensor} {metric.stat_key} (rank {rank})"
    for it, value in zip(iterations.tolist(), values.tolist(), strict=True):
        if _is_scale_inv(metric):
            value = read_point(state, value)
            if value is None:
                continue  # an impossible E8M0 byte: as if never logged
        if state.last_iteration is not None and it <= state.last_iteration:
            continue  # a re-sent or out-of-order point: already seen
        if not math.isfinite(value):
            if not state.nonfinite:
                state.nonfinite = True
                events.append(
                    _event(
                        "nonfinite",
                        Severity.SEVERE,
                        metric,
                        rank,
                        it,
                        None,
                        f"{name}: {value} at iteration {it}",
                        value_text=str(value),
                    )
                )
            state.last_iteration = it
            continue
        state.nonfinite = False
        scale = _is_scale_inv(metric)
        if scale and state.moved and state.last_value is not None and state.last_value > 0 and value > 0:
            ratio = value / state.last_value
            factor = thresholds.scale_jump_factor
            if ratio >= factor or ratio <= 1.0 / factor:
                kind = "scale_inv_rise" if ratio > 1 else "scale_inv_drop"
                events.append(
                    _event(
                        kind,
                        Severity.CRITICAL,
                        metric,
                        rank,
                        it,
                        value,
                        f"{name}: {_fmt(state.last_value)} → {_fmt(value)} at iteration {it} "
                        f"({_fmt(ratio)}× in one step)",
                        previous=state.last_value,
                        ratio=ratio,
                        previous_iteration=state.last_iteration,
                    )
                )
        if scale and value != 1.0:
            state.moved = True  # the first departure from exactly 1.0 ends delayed scaling's warm-up
        if _is_underflow(metric):
            recent = [v for _i, v in state.window][-(POINTS - 1) :] + [value] if POINTS > 1 else [value]
            band = thresholds.band(float(np.median(recent))) if len(recent) >= POINTS else Severity.OK
            if band > Severity(state.band) and band >= Severity.WARNING:
                level = float(np.median(recent))
                events.append(
                    _event(
                        "band_crossing",
                        band,
                        metric,
                        rank,
                        it,
                        level,
                        f"{name}: underflows at {level:.2f} % (median of the last {POINTS} points) at iteration "
                        f"{it}, {band.value} band (≥ {_band_floor(band, thresholds):g} %)",
                        band=band.value,
                        previous_band=state.band,
                        point_value=value,
                    )
                )
            state.band = band.value
            if band >= Severity.CRITICAL:
                state.projected = False
        state.window.append([it, value])
        del state.window[:-WINDOW]
        state.last_value, state.last_iteration = value, it
    if _is_underflow(metric) and len(iterations):
        projected = _projection(state, metric, rank, thresholds, horizon_steps, name)
        if projected is not None:
            events.append(projected)
    return events


def read_point(state: SeriesState, value: float) -> float | None:
    """policy/live/scales.py one point at a time: an undecided series is decided by its first finite value off 1.0
    and 0 (a byte >= 64: E8M0), an E8M0 one turns linear at its first finite non-byte value; E8M0 bytes become
    2^(b - 127), bytes 0 and 255 are left out (None)."""
    byte = math.isfinite(value) and value == round(value) and 0 <= value <= 255
    if state.form == UNDECIDED and math.isfinite(value) and value not in (0.0, 1.0):
        state.form = E8M0 if byte and value >= 64 else LINEAR
    if state.form == E8M0 and math.isfinite(value) and not byte:
        state.form = LINEAR
    if state.form != E8M0:
        return value
    if value in (0.0, 255.0):
        return None
    return 2.0 ** (value - 127) if math.isfinite(value) else value


def _random_increments(rng: np.random.Generator, metric: MetricName) -> list[tuple[np.ndarray, np.ndarray]]:
    pieces, it = [], 0
    bytes_ = rng.random() < 0.5
    for _ in range(rng.integers(1, 6)):
        n = int(rng.integers(0, 40))
        steps = rng.integers(-3, 12, size=n)  # some go backwards or repeat: already seen
        its = it + np.cumsum(steps)
        it = int(its.max()) if n else it
        if metric is SCALE and bytes_:  # E8M0 bytes: swings of several binades, now and then byte 0 or 255
            vals = rng.choice([118.0, 120.0, 121.0, 128.0, 0.0, 255.0, 130.0], size=n)
            if rng.random() < 0.1:
                vals[rng.integers(0, max(n, 1)) if n else 0 :] = 0.01  # turns linear
        elif metric is SCALE:
            vals = 10.0 ** rng.choice([-2.0, -2.0, -2.5, -4.0, 0.0, -1.0], size=n)
            vals[rng.random(n) < 0.05] = 0.0
        else:
            vals = np.cumsum(rng.normal(0.05, 0.6, size=n)).clip(0, None)
        special = rng.random(n)
        vals[special < 0.05] = np.nan
        vals[(special >= 0.05) & (special < 0.08)] = np.inf
        vals[(special >= 0.08) & (special < 0.1)] = -np.inf
        if n and rng.random() < 0.2:  # a re-sent increment
            pieces.append((its.astype(np.int64), vals))
        pieces.append((its.astype(np.int64), vals))
    return pieces


def _same(a: LiveEvent, b: LiveEvent) -> bool:
    def norm(event: LiveEvent) -> tuple:
        return tuple(
            "nan" if isinstance(v, float) and math.isnan(v) else v
            for v in (event.kind, event.severity, event.rank, event.iteration, event.value, event.message)
        ) + (repr(sorted(event.detail.items())),)

    return norm(a) == norm(b)


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("metric", [UF, SCALE, OTHER], ids=["underflows", "scale_inv", "other"])
def test_the_vectorised_detectors_equal_the_per_point_reference(seed: int, metric: MetricName) -> None:
    rng = np.random.default_rng(seed)
    fast, slow = SeriesState(), SeriesState()
    for its, vals in _random_increments(rng, metric):
        got = advance(fast, metric, 1, its, vals, T)
        want = advance_per_point(slow, metric, 1, its, vals, T)
        assert len(got) == len(want) and all(_same(a, b) for a, b in zip(got, want, strict=True)), (got, want)
        assert fast.to_dict() == slow.to_dict()


def test_the_work_per_increment_does_not_grow_with_its_points() -> None:
    """Vectorised means no Python line runs per point: count the lines executed in policy/live/events.py (a
    deterministic measure, not a timing) for 100 and for 100,000 points with one crossing each."""

    def lines_run(points: int) -> int:
        its = np.arange(points, dtype=np.int64) * 10
        vals = np.full(points, 0.2)
        vals[points // 2 :] = 3.0  # a sustained rise
        count = 0

        def tracer(frame, event, _arg):
            nonlocal count
            if frame.f_code.co_filename.endswith("live_events.py"):
                if event == "line":
                    count += 1
                return tracer
            return None

        sys.settrace(tracer)
        try:
            events = advance(SeriesState(), UF, 0, its, vals, T)
        finally:
            sys.settrace(None)
        assert [e.kind for e in events] == ["band_crossing"]
        return count

    small, large = lines_run(100), lines_run(100_000)
    assert large <= small + 50, (small, large)  # the per-point loop ran ~15 lines per point
