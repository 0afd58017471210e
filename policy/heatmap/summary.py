"""Numbers a heatmap shows besides its cells: row levels, the summary box, the boxed worst rows, the band legend.

* A row's level is the p95 (nearest rank, lower) of its finite points: robust to a single spike, still sensitive
  to a sustained problem. Rows are boxed when their level is in the critical band or above, worst first, at most
  `boxes` of them (the bionemo heatmap boxes the top 5 layers above 2 %).
* The summary: components with data, BF16 rows, the max and mean over every finite point, and the number of
  rows whose level is at or above `critical`. Severity bands, boxes and the critical count only apply to
  percentage stats (underflows%, overflows%); other stats (scale_inv_*, mse) get the plain numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fp8_policy.policy.heatmap.matrix import HeatmapMatrix
from fp8_policy.policy.thresholds import Thresholds

DEFAULT_VMAX = 6.0  # % — the colour cap of the heatmap users know
LEVEL_QUANTILE = 0.95
DEFAULT_BOXES = 5


def is_percent_stat(stat_key: str) -> bool:
    """underflows%, overflows%, mxfp8_underflows%_columnwise, ... (the stats the severity bands are made for)."""
    return "%" in stat_key


@dataclass(frozen=True, slots=True)
class Band:
    name: str  # ok | warning | critical | severe
    low: float
    high: float  # clipped to the colour scale's maximum


@dataclass(frozen=True, slots=True)
class HeatSummary:
    components: int  # rows with data
    bf16_rows: int
    max: float | None
    mean: float | None
    critical: int | None  # rows with level >= critical_threshold; None for non-percent stats
    critical_threshold: float | None
    boxed: tuple[int, ...]  # row indices, worst level first
    levels: np.ndarray  # per row, NaN without data

    def to_dict(self) -> dict[str, Any]:
        return {
            "components": self.components,
            "bf16_rows": self.bf16_rows,
            "max": _num(self.max),
            "mean": _num(self.mean),
            "critical": self.critical,
            "critical_threshold": self.critical_threshold,
            "boxed": list(self.boxed),
        }


def row_levels(values: np.ndarray, quantile: float = LEVEL_QUANTILE) -> np.ndarray:
    """Per row: the `quantile` of its finite points (nearest rank, lower); NaN for rows without any."""
    finite = np.where(np.isfinite(values), values, np.nan)
    ordered = np.sort(finite, axis=1)  # NaN sort last
    counts = np.count_nonzero(~np.isnan(finite), axis=1)
    index = np.maximum(np.floor(quantile * (counts - 1)), 0).astype(np.int64)
    levels = (
        np.take_along_axis(ordered, index[:, None], axis=1)[:, 0]
        if ordered.shape[1]
        else np.full(ordered.shape[0], np.nan)
    )
    levels[counts == 0] = np.nan
    return levels


def summarize(
    matrix: HeatmapMatrix, thresholds: Thresholds, *, percent: bool, boxes: int = DEFAULT_BOXES
) -> HeatSummary:
    data = matrix.data_rows()
    levels = row_levels(matrix.values)
    points = matrix.values[data]
    finite = points[np.isfinite(points)]
    critical = boxed = None
    if percent:
        hot = np.flatnonzero(levels >= thresholds.critical)  # NaN compares False
        critical = int(hot.shape[0])
        boxed = tuple(int(k) for k in hot[np.argsort(-levels[hot], kind="stable")][:boxes])
    return HeatSummary(
        components=int(data.sum()),
        bf16_rows=int((~data).sum()),
        max=float(finite.max()) if finite.size else None,
        mean=float(finite.mean()) if finite.size else None,
        critical=critical,
        critical_threshold=thresholds.critical if percent else None,
        boxed=boxed or (),
        levels=levels,
    )


def default_vmax(values: np.ndarray, percent: bool) -> float:
    """6 % for percentage stats; otherwise the largest finite value (1.0 when there is none)."""
    if percent:
        return DEFAULT_VMAX
    finite = values[np.isfinite(values)]
    top = float(finite.max()) if finite.size else 0.0
    return top if top > 0 else 1.0


def severity_bands(thresholds: Thresholds, vmax: float) -> list[Band]:
    """The bands that start below `vmax`, each clipped to it."""
    edges = [
        ("ok", 0.0),
        ("warning", thresholds.warning),
        ("critical", thresholds.critical),
        ("severe", thresholds.severe),
    ]
    bands = []
    for k, (name, low) in enumerate(edges):
        high = edges[k + 1][1] if k + 1 < len(edges) else vmax
        if low < vmax:
            bands.append(Band(name, low, min(high, vmax)))
    return bands


def _num(value: float | None) -> float | None:
    return None if value is None or not np.isfinite(value) else round(float(value), 4)
