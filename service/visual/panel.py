"""What a heatmap figure is drawn from: one `Panel` per run and the `Style` shared by all panels.

Belongs here: these records only; `render` (the panels) and `legend` (the legend column) both read them, and
neither imports the other's records, so the two drawing modules form no import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fp8_policy.policy.heatmap import HeatmapMatrix, HeatSummary
from fp8_policy.policy.thresholds import Thresholds


@dataclass(slots=True)
class Panel:
    """One run's heatmap and everything drawn around it."""

    matrix: HeatmapMatrix
    summary: HeatSummary
    title: str
    subtitle: str
    skip_layers: frozenset[str] | None  # None: the recommendation is not shown
    gemm_overrides: dict[str, tuple[str, ...]] = field(default_factory=dict)  # layer -> GEMMs kept in BF16


@dataclass(frozen=True, slots=True)
class Style:
    vmax: float
    thresholds: Thresholds
    percent: bool
    value_label: str  # "gradient underflows%"
    mark_iteration: int | None = None
    boxes: int = 5
