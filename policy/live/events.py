"""Early warnings while a run is still training: events found in each increment of new statistics points.

Belongs here: what counts as an event and how it is detected from a series' small running state, so the cost of
an increment is proportional to its new points, not to the run so far. Storing the state and the events is
`db/`'s, receiving the log bytes `service/live/`'s, delivering alerts `service/alerts/`'s.

Events (kinds):
- `band_crossing`: an underflows% series' level enters a worse band (warning / critical / severe of the bands of
  the format the series measures: NVFP4's for `nvfp4_*`, a stated layer recipe's; policy/analysis/format_bands.py).
  The level is the median of its last `min_points` finite points, the batch analysis' smallest window
  (policy/analysis/signals.py): one point never crosses a band, a sustained level does (up to two spikes in five
  points are noise), so a warm-up point - delayed scaling's first iteration, logged with its scale still exactly
  1.0 (bionemo: 21.47 % gradient underflow at iteration 0 on every layer) - raises nothing.
- `projected_crossing`: a rising underflows% series is projected to cross `critical` within `horizon_steps`
  iterations (Theil–Sen slope over the recent window: a median of pairwise slopes, robust to single spikes).
- `scale_inv_drop` / `scale_inv_rise`: consecutive scale_inv points differ by at least `scale_jump_factor` (MXFP8's
  E8M0 bytes read as the powers of two they encode first, as the batch analysis reads them: policy/live/scales.py)
  (default 8×, three binades), once the scale has moved: a series' first departure from exactly 1.0 is delayed
  scaling's warm-up ending (the first scale computed from an amax), as the batch analysis' warm-up rule reads it,
  not a jump. A scaling factor that collapses or explodes step to step precedes NaNs or
  underflow (see NVIDIA's FP8 primer on per-tensor scaling,
  https://docs.nvidia.com/deeplearning/transformer-engine/user-guide/examples/fp8_primer.html).
- `nonfinite`: the first NaN or ±inf in a series.
- `rank_divergence`: with at least three ranks, one rank's recent underflows% level differs from the others'
  median by `rank_outlier_gap` points and `rank_outlier_ratio` times.
Each event is raised once per episode: a series has to leave the condition before the same event fires again.
The service runs them for every series of a piece at once (policy/live/batch.py: the same events and state); the
per-series functions here define them and are its reference.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fp8_policy.policy.live.compact import Keys, as_stored, from_compact, rows, to_compact
from fp8_policy.policy.live.levels import _band_floor as _band_floor  # re-exported: the reference test's
from fp8_policy.policy.live.levels import band_event, level_points, sustained_levels
from fp8_policy.policy.live.record import LiveEvent as LiveEvent  # re-exported: where the detectors' users import it
from fp8_policy.policy.live.record import _event as _event
from fp8_policy.policy.live.scales import read_scales
from fp8_policy.policy.records import MetricName
from fp8_policy.policy.thresholds import Severity, Thresholds
from fp8_policy.policy.vocabulary import EVENT_KINDS as EVENT_KINDS  # re-exported: defined there for the API
from fp8_policy.policy.vocabulary import STATS_EVENT_KINDS as STATS_EVENT_KINDS  # the kinds raised here

WINDOW = 32  # recent finite points kept per series for trends and rank levels
LEVEL_POINTS = 4  # points averaged for a series' "recent level" (rank divergence)
MIN_TREND_POINTS = 8
DEFAULT_HORIZON_STEPS = 2_000


@dataclass(slots=True)
class SeriesState:
    """What the detectors remember of one (rank, metric) series between increments (JSON-able)."""

    last_iteration: int | None = None
    last_value: float | None = None  # last finite value
    band: str = Severity.OK.value
    projected: bool = False  # a projected_crossing was raised and the series is still below critical
    nonfinite: bool = False
    diverging: bool = False
    window: list[list[float]] = field(default_factory=list)  # [[iteration, value], ...] recent finite points
    moved: bool = False  # a scale_inv series has left exactly 1.0 (delayed scaling's warm-up is over)
    form: int = 0  # how a scale_inv series is read: undecided / E8M0 bytes / linear (policy/live/scales.py)

    def to_dict(self) -> dict[str, Any]:
        return to_compact(self, _SERIES_STATE_KEYS)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SeriesState:
        return from_compact(cls, data, _SERIES_STATE_KEYS)

    def level(self) -> float | None:
        if not self.window:
            return None
        return float(np.mean([v for _i, v in self.window[-LEVEL_POINTS:]]))


_SERIES_STATE_KEYS: Keys = {
    "last_iteration": ("i", as_stored),
    "last_value": ("v", as_stored),
    "band": ("b", as_stored),
    "projected": ("p", bool),
    "nonfinite": ("n", bool),
    "diverging": ("d", bool),
    "window": ("w", rows),
    "moved": ("m", bool),
    "form": ("f", int),
}


def _is_underflow(metric: MetricName) -> bool:
    return metric.stat == "underflows%"


def _is_scale_inv(metric: MetricName) -> bool:
    return metric.stat in ("scale_inv_min", "scale_inv_max")


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def advance(
    state: SeriesState,
    metric: MetricName,
    rank: int,
    iterations: np.ndarray,
    values: np.ndarray,
    thresholds: Thresholds,
    horizon_steps: int = DEFAULT_HORIZON_STEPS,
    scale_form: int = 0,
) -> list[LiveEvent]:
    """Feed one series' new points (iteration order, newer than the state's) and return the events they raise.

    `thresholds`: the bands this series is judged with (policy/analysis/format_bands.py `SeriesBands.of`: an
    `nvfp4_*` stat with NVFP4's); `scale_form`: how a scale_inv series starts to be read (`SeriesBands.scale_form`:
    MXFP8's E8M0 bytes as powers of two, policy/live/scales.py).

    Vectorised over the points (numpy): which points are new, which raise an event and the state after them are
    array operations; Python only formats the few events. Same results as visiting the points one by one
    (tests/policy/live/test_live_events.py keeps that per-point reference and compares)."""
    name = f"{metric.layer} {metric.tensor} {metric.stat_key} (rank {rank})"
    its = np.asarray(iterations, dtype=np.int64)
    vals = np.asarray(values, dtype=np.float64)
    if its.size and _is_scale_inv(metric):  # read (E8M0 bytes converted, impossible ones out) before anything else
        form = np.array([state.form or scale_form], dtype=np.int8)
        vals, keep = read_scales(np.zeros(its.size, dtype=np.int64), vals, form)
        state.form = int(form[0])
        if not keep.all():
            its, vals = its[keep], vals[keep]
    if its.size:
        its, vals = _new_points(state.last_iteration, its, vals)
    found: list[tuple[int, int, LiveEvent]] = []  # (point, order within the point, event)
    if its.size:
        previous_its = np.concatenate(([-1 if state.last_iteration is None else state.last_iteration], its[:-1]))
        bad = ~np.isfinite(vals)
        for k in np.flatnonzero(bad & ~np.concatenate(([state.nonfinite], bad[:-1]))).tolist():
            it, value = int(its[k]), float(vals[k])
            message = f"{name}: {value} at iteration {it}"
            event = _event("nonfinite", Severity.SEVERE, metric, rank, it, None, message, value_text=str(value))
            found.append((k, 0, event))
        at = np.flatnonzero(~bad)  # the finite points
        good = vals[at]
        if good.size:
            last = np.nan if state.last_value is None else state.last_value
            before = np.concatenate(([last], good[:-1]))  # the last finite value before each finite point
            if _is_scale_inv(metric):
                moved = state.moved | (np.cumsum(good != 1.0) - (good != 1.0) > 0)  # moved before each point
                found += _scale_jumps(state, metric, rank, name, thresholds, at, good, before, its, previous_its, moved)
                state.moved = bool(state.moved or (good != 1.0).any())
            if _is_underflow(metric):
                window = np.asarray([v for _i, v in state.window], dtype=np.float64)
                levels = sustained_levels(window, good, level_points(thresholds))
                bands = _band_ranks(levels, thresholds)
                found += _band_crossings(state, metric, rank, name, thresholds, at, levels, bands, its, good)
                state.band = _BY_RANK[int(bands[-1])].value
                if (bands >= Severity.CRITICAL.rank).any():
                    state.projected = False
            fresh = [
                [int(i), float(v)] for i, v in zip(its[at[-WINDOW:]].tolist(), good[-WINDOW:].tolist(), strict=True)
            ]
            state.window = (state.window + fresh)[-WINDOW:]
            state.last_value = float(good[-1])
        state.nonfinite = bool(bad[-1])
        state.last_iteration = int(its[-1])
    found.sort(key=lambda item: (item[0], item[1]))
    events = [event for _k, _order, event in found]
    if _is_underflow(metric) and len(iterations):
        projected = _projection(state, metric, rank, thresholds, horizon_steps, name)
        if projected is not None:
            events.append(projected)
    return events


_BY_RANK = {severity.rank: severity for severity in Severity}


def _new_points(last: int | None, its: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The points newer than every point before them (the state's last iteration included): a re-sent or
    out-of-order point was already seen."""
    if (last is None or its[0] > last) and bool((its[1:] > its[:-1]).all()):
        return its, vals  # the usual increment: every point new, in order
    floor = np.iinfo(np.int64).min if last is None else last
    seen = np.maximum(np.concatenate(([floor], np.maximum.accumulate(its)[:-1])), floor)
    keep = its > seen
    return (its, vals) if keep.all() else (its[keep], vals[keep])


def _band_ranks(values: np.ndarray, thresholds: Thresholds) -> np.ndarray:
    """`Thresholds.band(value).rank` of each value (NaN: no level yet, ok)."""
    ranks = np.zeros(values.shape, dtype=np.int8)
    ranks[values >= thresholds.warning] = Severity.WARNING.rank
    ranks[values >= thresholds.critical] = Severity.CRITICAL.rank
    ranks[values >= thresholds.severe] = Severity.SEVERE.rank
    return ranks


def _scale_jumps(
    state: SeriesState,
    metric: MetricName,
    rank: int,
    name: str,
    thresholds: Thresholds,
    at: np.ndarray,
    good: np.ndarray,
    before: np.ndarray,
    its: np.ndarray,
    previous_its: np.ndarray,
    moved: np.ndarray,
) -> list[tuple[int, int, LiveEvent]]:
    jumps = moved & scale_jumped(good, before, thresholds)
    found = []
    for j in np.flatnonzero(jumps).tolist():
        k = int(at[j])
        it, value, previous = int(its[k]), float(good[j]), float(before[j])
        previous_it = None if k == 0 and state.last_iteration is None else int(previous_its[k])
        found.append((k, 1, scale_jump_event(name, metric, rank, it, value, previous, previous_it)))
    return found


def scale_jumped(good: np.ndarray, before: np.ndarray, thresholds: Thresholds) -> np.ndarray:
    """Which points `good` differ from the value `before` each (both > 0) by `scale_jump_factor` or more, up or down
    (also read by policy/live/batch.py)."""
    factor = thresholds.scale_jump_factor
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratios = good / before
        jumped: np.ndarray = (before > 0) & (good > 0) & ((ratios >= factor) | (ratios <= 1.0 / factor))
    return jumped


def scale_jump_event(
    name: str, metric: MetricName, rank: int, it: int, value: float, previous: float, previous_it: int | None
) -> LiveEvent:
    """`scale_inv_rise` / `scale_inv_drop` for a jump from `previous` to `value` (also raised by policy/live/batch.py)."""
    ratio = value / previous
    kind = "scale_inv_rise" if ratio > 1 else "scale_inv_drop"
    message = f"{name}: {_fmt(previous)} → {_fmt(value)} at iteration {it} ({_fmt(ratio)}× in one step)"
    detail = {"previous": previous, "ratio": ratio, "previous_iteration": previous_it}
    return _event(kind, Severity.CRITICAL, metric, rank, it, value, message, **detail)


def _band_crossings(
    state: SeriesState,
    metric: MetricName,
    rank: int,
    name: str,
    thresholds: Thresholds,
    at: np.ndarray,
    levels: np.ndarray,
    bands: np.ndarray,
    its: np.ndarray,
    points: np.ndarray,
) -> list[tuple[int, int, LiveEvent]]:
    before = np.concatenate(([Severity(state.band).rank], bands[:-1]))
    found = []
    for j in np.flatnonzero((bands > before) & (bands >= Severity.WARNING.rank)).tolist():
        k, band, previous = int(at[j]), _BY_RANK[int(bands[j])], _BY_RANK[int(before[j])]
        event = band_event(
            name, metric, rank, int(its[k]), float(levels[j]), float(points[j]), band, previous, thresholds
        )
        found.append((k, 2, event))
    return found


_PAIRS: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # n -> the index pairs i < j (a window has at most 32 points)


def theil_sen_slope(x: np.ndarray, y: np.ndarray) -> float:
    """Median of the pairwise slopes (Theil–Sen): a single spike cannot tilt it."""
    pairs = _PAIRS.get(len(x))
    if pairs is None:
        pairs = np.triu_indices(len(x), k=1)
        if len(x) <= WINDOW:
            _PAIRS[len(x)] = pairs
    i, j = pairs
    dx = x[j] - x[i]
    keep = dx != 0
    if not keep.any():
        return 0.0
    return float(np.median((y[j] - y[i])[keep] / dx[keep]))


def _projection(
    state: SeriesState, metric: MetricName, rank: int, thresholds: Thresholds, horizon_steps: int, name: str
) -> LiveEvent | None:
    if state.projected or Severity(state.band) >= Severity.CRITICAL or len(state.window) < MIN_TREND_POINTS:
        return None
    points = np.asarray(state.window, dtype=np.float64)
    x, y = points[:, 0], points[:, 1]
    slope = theil_sen_slope(x, y)
    if slope <= 0:
        return None
    intercept = float(np.median(y - slope * x))
    last_it = float(x[-1])
    fitted_now = intercept + slope * last_it
    rise = slope * (x[-1] - x[0])
    if rise < thresholds.trend_min_rise:
        return None
    crossing = (thresholds.critical - intercept) / slope
    if crossing <= last_it or crossing - last_it > horizon_steps:
        return None
    state.projected = True
    steps = int(round(crossing - last_it))
    return _event(
        "projected_crossing",
        Severity.WARNING,
        metric,
        rank,
        int(last_it),
        float(y[-1]),
        f"{name}: rising {slope * 1000:.3g} points per 1k iterations, projected to reach "
        f"{thresholds.critical:g} % at iteration {int(round(crossing))} (in {steps} steps)",
        projected_iteration=int(round(crossing)),
        slope_per_1k=slope * 1000,
        fitted_now=fitted_now,
    )


def rank_divergence(
    states: dict[tuple[int, MetricName], SeriesState], thresholds: Thresholds, touched: set[MetricName]
) -> list[LiveEvent]:
    """Across ranks, for the underflows% metrics that got new points: a rank whose recent level stands apart."""
    by_metric: dict[MetricName, list[tuple[int, SeriesState]]] = {}
    for (rank, metric), state in states.items():
        if metric in touched and _is_underflow(metric):
            by_metric.setdefault(metric, []).append((rank, state))
    events: list[LiveEvent] = []
    for metric, members in by_metric.items():
        levels = {rank: state.level() for rank, state in members}
        known = {rank: level for rank, level in levels.items() if level is not None}
        if len(known) < 3:
            continue
        for rank, state in members:
            level = known.get(rank)
            if level is None:
                continue
            others = float(np.median([v for r, v in known.items() if r != rank]))
            gap = abs(level - others)
            ratio = (max(level, others) + 1e-9) / (min(level, others) + 1e-9)
            apart = gap >= thresholds.rank_outlier_gap and ratio >= thresholds.rank_outlier_ratio
            if apart and not state.diverging:
                events.append(
                    _event(
                        "rank_divergence",
                        Severity.CRITICAL,
                        metric,
                        rank,
                        int(state.last_iteration or 0),
                        level,
                        f"{metric.layer} {metric.tensor} {metric.stat_key}: rank {rank} at "
                        f"{level:.2f} % while the other ranks' median is {others:.2f} %",
                        others_median=others,
                        ranks=len(known),
                    )
                )
            state.diverging = apart
    return events
