"""The level a live band crossing judges: the median of a series' last `min_points` finite points, and the event.

Belongs here: `level_points`, `sustained_levels` (the level after each new point) and `band_event` (the event's
words), shared by the per-series detectors (policy/live/events.py) and the batched ones (policy/live/batch.py).
Rule (policy/live/events.py, `band_crossing`): one point never crosses a band, a sustained level does - the batch
analysis' smallest window (`min_points`, policy/analysis/signals.py).
"""

from __future__ import annotations

import numpy as np

from fp8_policy.policy.live.record import LiveEvent, _event
from fp8_policy.policy.records import MetricName
from fp8_policy.policy.thresholds import Severity, Thresholds

WINDOW = 32  # events.WINDOW: the recent finite points a series keeps


def level_points(thresholds: Thresholds) -> int:
    """How many recent points a band crossing's level is the median of (`min_points`, at most the window)."""
    return max(1, min(thresholds.min_points, WINDOW))


def sustained_levels(window: np.ndarray, new: np.ndarray, points: int) -> np.ndarray:
    """For each new finite point, the median of the last `points` finite points up to it (`window`: the series'
    earlier ones, oldest first); NaN while fewer than `points` were seen."""
    combined = np.concatenate((window, new))
    ends = window.shape[0] + np.arange(new.shape[0])  # each new point's position in `combined`
    idx = ends[:, None] + np.arange(1 - points, 1)[None, :]
    levels = np.median(combined[np.maximum(idx, 0)], axis=1) if new.size else np.zeros(0)
    levels[idx[:, 0] < 0] = np.nan
    return levels


def _band_floor(band: Severity, thresholds: Thresholds) -> float:
    return {
        Severity.WARNING: thresholds.warning,
        Severity.CRITICAL: thresholds.critical,
        Severity.SEVERE: thresholds.severe,
    }.get(band, 0.0)


def band_event(
    name: str,
    metric: MetricName,
    rank: int,
    it: int,
    level: float,
    point: float,
    band: Severity,
    previous: Severity,
    thresholds: Thresholds,
) -> LiveEvent:
    """`band_crossing` of a sustained level (also raised by policy/live/batch.py)."""
    message = (
        f"{name}: underflows at {level:.2f} % (median of the last {level_points(thresholds)} points) at iteration "
        f"{it}, {band.value} band (≥ {_band_floor(band, thresholds):g} %)"
    )
    detail = {"band": band.value, "previous_band": previous.value, "point_value": point}
    return _event("band_crossing", band, metric, rank, it, level, message, **detail)
