"""Pure layout of a per-layer heatmap: the components × iterations matrix, its summary, bands and geometry.

Input contract: `LayerInfo`s in model order and `Series` of one (tensor, stat) — no I/O, no database, no drawing.
`build_matrix` → `HeatmapMatrix` (rows, iteration columns, values with NaN for "not logged"); `summarize` →
`HeatSummary` (components, max, mean, critical count, boxed rows); `severity_bands` for the legend;
`plan_geometry` → `HeatmapGeometry` (figure size and the pixel extent of the cells). The service draws it.
"""

from __future__ import annotations

from fp8_policy.policy.heatmap.geometry import HeatmapGeometry, Rect, plan_geometry
from fp8_policy.policy.heatmap.matrix import (
    ROW_BF16,
    ROW_DATA,
    HeatmapMatrix,
    HeatRow,
    RowSpan,
    build_matrix,
    sublayers_of,
)
from fp8_policy.policy.heatmap.summary import (
    DEFAULT_BOXES,
    DEFAULT_VMAX,
    Band,
    HeatSummary,
    default_vmax,
    is_percent_stat,
    row_levels,
    severity_bands,
    summarize,
    verdict_severities,
)

__all__ = [
    "DEFAULT_BOXES",
    "DEFAULT_VMAX",
    "ROW_BF16",
    "ROW_DATA",
    "Band",
    "HeatRow",
    "HeatSummary",
    "HeatmapGeometry",
    "HeatmapMatrix",
    "Rect",
    "RowSpan",
    "build_matrix",
    "default_vmax",
    "is_percent_stat",
    "plan_geometry",
    "row_levels",
    "severity_bands",
    "sublayers_of",
    "summarize",
    "verdict_severities",
]
