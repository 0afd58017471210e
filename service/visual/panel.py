"""What a heatmap figure is drawn from: one `Panel` per run and the `Style` shared by all panels.

Belongs here: these records, the image formats and the column reduction (`fit_columns`) that the image and the
JSON view share; `render` (the panels) and `legend` (the legend column) both read them, and neither imports the
other's records, so the two drawing modules form no import cycle. No matplotlib here: the API process imports
this module at start-up, and matplotlib (about 0.4 s of CPU) only where an image is drawn (service/visual/pool.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fp8_policy.policy.heatmap import HeatmapMatrix, HeatSummary
from fp8_policy.policy.thresholds import Thresholds

MEDIA_TYPES = {"png": "image/png", "svg": "image/svg+xml"}


@dataclass(slots=True)
class Panel:
    """One run's heatmap and everything drawn around it."""

    matrix: HeatmapMatrix
    summary: HeatSummary
    title: str
    subtitle: str
    skip_layers: frozenset[str] | None  # None: the recommendation is not shown
    gemm_overrides: dict[str, tuple[str, ...]] = field(default_factory=dict)  # layer -> GEMMs kept in BF16
    precisions: dict[str, str] = field(default_factory=dict)  # layer -> recommended precision (the headline's)
    recipe: str | None = None  # the recommended (outer) recipe


@dataclass(frozen=True, slots=True)
class Style:
    vmax: float
    thresholds: Thresholds
    percent: bool
    value_label: str  # "gradient underflows%"
    mark_iteration: int | None = None
    boxes: int = 5


def fit_columns(values: np.ndarray, pixels: float) -> tuple[np.ndarray, int]:
    """Average runs of k columns (NaN-aware) so that no more columns than pixels reach `imshow`.

    Returns the reduced matrix and the number of original columns it spans (a multiple of k; the padding
    beyond the last column is clipped by the axis limits). k = 1 leaves the matrix as it is.
    """
    columns = values.shape[1]
    k = max(1, int(np.ceil(columns / max(pixels, 1.0))))
    if k == 1:
        return values, columns
    buckets = -(-columns // k)
    padded = np.full((values.shape[0], buckets * k), np.nan)
    padded[:, :columns] = values
    blocks = padded.reshape(values.shape[0], buckets, k)
    finite = np.isfinite(blocks)
    counts = finite.sum(axis=2)
    sums = np.where(finite, blocks, 0.0).sum(axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / counts, np.nan), buckets * k
