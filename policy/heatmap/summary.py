"""Numbers a heatmap shows besides its cells: row levels, the summary box, the boxed worst rows, the band legend.

* A row's level is the p95 (nearest rank, lower) of its finite points: robust to a single spike, still sensitive
  to a sustained problem; it is what hover shows. Which rows are boxed and counted as critical is the analysis's
  verdict of that row's series (`severities`, from `Analysis` layers' `series`: the same verdict the findings,
  the layer table and gate use) when one is given: rows at critical or above, worst verdict first, at most
  `boxes` of them (the bionemo heatmap boxes the top 5 layers above 2 %). Without verdicts (a live run still
  being received, a stat the analysis does not band) the row level decides, as the bionemo heatmap does, each
  row against its own bands (`row_bands`: an `nvfp4_*` stat with NVFP4's; policy/analysis/format_bands.py), and
  `critical_threshold` is the critical bound the drawn rows share (the requested one when they differ).
* The summary: components with data, BF16 rows, the max and mean over every finite point, and the number of
  rows whose level is at or above `critical`. Severity bands, boxes and the critical count only apply to
  percentage stats (underflows%, overflows%); other stats (scale_inv_*, mse) get the plain numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fp8_policy.policy.heatmap.matrix import HeatmapMatrix
from fp8_policy.policy.thresholds import Severity, Thresholds
from fp8_policy.policy.vocabulary import DEFAULT_BOXES as DEFAULT_BOXES  # re-exported: defined there for the API

DEFAULT_VMAX = 6.0  # % — the colour cap of the heatmap users know
LEVEL_QUANTILE = 0.95


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
    severities: tuple[Severity | None, ...] = field(default=())  # per row: the analysis's verdict, None: none
    boxed_by: str = "row level"  # "analysis verdict" when `severities` decided the boxes

    def severity(self, row: int) -> Severity | None:
        return self.severities[row] if row < len(self.severities) else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "components": self.components,
            "bf16_rows": self.bf16_rows,
            "max": _num(self.max),
            "mean": _num(self.mean),
            "critical": self.critical,
            "critical_threshold": self.critical_threshold,
            "boxed": list(self.boxed),
            "boxed_by": self.boxed_by,
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
    matrix: HeatmapMatrix,
    thresholds: Thresholds,
    *,
    percent: bool,
    boxes: int = DEFAULT_BOXES,
    severities: Mapping[str, Severity] | None = None,
    row_bands: Mapping[str, Thresholds] | None = None,
) -> HeatSummary:
    """`severities`: layer -> the analysis's verdict of the drawn series; given, it alone decides the boxes.
    `row_bands`: layer -> the bands its drawn series is judged with when not `thresholds` (policy/analysis/format_bands.py:
    an `nvfp4_*` stat with NVFP4's, a mixed-format run's layer with its own format's)."""
    data = matrix.data_rows()
    bands = [(row_bands or {}).get(row.layer, thresholds) for row in matrix.rows]
    shared = {b.critical for k, b in enumerate(bands) if data[k]}
    critical_at = shared.pop() if len(shared) == 1 else thresholds.critical
    levels = row_levels(matrix.values)
    points = matrix.values[data]
    finite = points[np.isfinite(points)]
    critical = boxed = None
    per_row: tuple[Severity | None, ...] = ()
    if severities is not None:
        per_row = tuple(severities.get(row.layer) if data[k] else None for k, row in enumerate(matrix.rows))
        hot_rows = [k for k, sev in enumerate(per_row) if sev is not None and sev >= Severity.CRITICAL]
        hot_rows.sort(key=lambda k: (-(per_row[k] or Severity.OK).rank, -_sortable(float(levels[k]))))
        critical = len(hot_rows)
        boxed = tuple(hot_rows[:boxes])
    elif percent:
        critical_of = np.array([b.critical for b in bands], dtype=np.float64)
        hot = np.flatnonzero(levels >= critical_of)  # NaN compares False; each row against its own bands
        critical = int(hot.shape[0])
        boxed = tuple(int(k) for k in hot[np.argsort(-levels[hot], kind="stable")][:boxes])
    return HeatSummary(
        components=int(data.sum()),
        bf16_rows=int((~data).sum()),
        max=float(finite.max()) if finite.size else None,
        mean=float(finite.mean()) if finite.size else None,
        critical=critical,
        critical_threshold=critical_at if percent else None,
        boxed=boxed or (),
        levels=levels,
        severities=per_row,
        boxed_by="analysis verdict" if severities is not None else "row level",
    )


def verdict_severities(
    layers: Iterable[Mapping[str, Any]], tensor: str, stat_key: str, stat_prefix: str | None = None
) -> dict[str, Severity] | None:
    """layer -> the analysis's verdict of the series drawn (`tensor`, `stat_key` as logged), from the analysis
    JSON's layer rows (`series`). None when the analysis gives no verdict for that stat (scale_inv, mse, ...)."""
    stat = stat_key.removesuffix("_columnwise")
    if stat_prefix and stat.startswith(stat_prefix + "_"):
        stat = stat[len(stat_prefix) + 1 :]
    out: dict[str, Severity] = {}
    for row in layers:
        for verdict in row.get("series") or ():
            if verdict.get("tensor") == tensor and verdict.get("stat") == stat:
                out[str(row.get("name"))] = Severity(verdict["severity"])
    return out if out else None


def _sortable(level: float) -> float:
    return float(level) if level == level else -np.inf


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
