"""The components × iterations matrix of one (tensor, stat) of a run, built with numpy only.

Rows ("components"), in model order (the order of the `layers` argument, i.e. the stored `position`):
* default: one row per GEMM layer that logged the selected metric, plus one hatched row per GEMM layer that ran
  in BF16 (plan lines say high precision) and therefore logged nothing — it is shown, not silently missing;
* `sublayer="qkv"` (any logged sublayer name: qkv, proj, fc1, fc2, lm_head.dense, ...): only the layers of that
  sublayer, so for body GEMMs one row per block, labelled by the block number.
Columns are the union of every row's logged iterations; a row without a point at a column (another `freq`,
a later start) stays NaN and is drawn as background, never as zero. Several ranks are reduced by the max per
iteration (the worst rank decides what a user must look at); pass a single rank's series for one rank.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from fp8_policy.policy.analysis.layout import is_gemm_layer
from fp8_policy.policy.records import LayerGroup, LayerInfo, Precision, Series
from fp8_policy.policy.vocabulary import ROW_BF16 as ROW_BF16  # re-exported: the row kinds (defined there for the API)
from fp8_policy.policy.vocabulary import ROW_DATA as ROW_DATA


@dataclass(frozen=True, slots=True)
class HeatRow:
    """One component: which layer it shows and how it is drawn."""

    label: str  # short label for the axis ("3 qkv", "lm_head.dense", "block 3" in sublayer mode)
    layer: str  # exact layer name as logged
    group: str  # embedding | body | other | head
    kind: str  # ROW_DATA | ROW_BF16
    precision: str  # fp8 | high | mixed | unknown, from plan lines


@dataclass(frozen=True, slots=True)
class RowSpan:
    """Consecutive rows [start, stop) sharing a group or a kind."""

    name: str
    start: int
    stop: int

    @property
    def middle(self) -> float:
        return (self.start + self.stop - 1) / 2.0


@dataclass(slots=True)
class HeatmapMatrix:
    rows: tuple[HeatRow, ...]
    iterations: np.ndarray  # int64, ascending: the columns
    values: np.ndarray  # float64 (rows, columns); NaN = no point (or a BF16 row)

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.rows), int(self.iterations.shape[0])

    def row_index(self, layer: str) -> int | None:
        return next((k for k, row in enumerate(self.rows) if row.layer == layer), None)

    def column_index(self, iteration: int) -> int:
        """The column nearest to `iteration` (the matrix must have columns)."""
        its = self.iterations
        k = int(np.searchsorted(its, iteration))
        if k >= its.shape[0] or (k > 0 and iteration - its[k - 1] <= its[k] - iteration):
            k -= 1
        return max(k, 0)

    def group_spans(self) -> list[RowSpan]:
        return _spans([row.group for row in self.rows])

    def bf16_spans(self) -> list[RowSpan]:
        """Consecutive BF16 rows of one group (a span never crosses a group separator)."""
        spans = _spans([f"{row.kind}/{row.group}" for row in self.rows])
        return [RowSpan(ROW_BF16, s.start, s.stop) for s in spans if s.name.startswith(ROW_BF16 + "/")]

    def data_rows(self) -> np.ndarray:
        """Boolean mask of the rows that carry data."""
        return np.array([row.kind == ROW_DATA for row in self.rows], dtype=bool)


def build_matrix(
    layers: Sequence[LayerInfo], series: Iterable[Series], *, sublayer: str | None = None
) -> HeatmapMatrix:
    """The matrix of the given series (already filtered to one tensor and stat, one or all ranks)."""
    by_layer: dict[str, list[Series]] = {}
    for item in series:
        by_layer.setdefault(item.metric.layer, []).append(item)
    rows = tuple(_row(info, sublayer, info.name in by_layer) for info in layers if _selected(info, by_layer, sublayer))
    chunks = [s.iterations for name in (r.layer for r in rows) for s in by_layer.get(name, ())]
    iterations = np.unique(np.concatenate(chunks)) if chunks else np.zeros(0, dtype=np.int64)
    values = np.full((len(rows), iterations.shape[0]), np.nan)
    for k, row in enumerate(rows):
        for item in by_layer.get(row.layer, ()):
            cols = np.searchsorted(iterations, item.iterations)
            values[k, cols] = np.fmax(values[k, cols], item.values)  # max over ranks; NaN only where all are
    return HeatmapMatrix(rows, iterations.astype(np.int64), values)


def sublayers_of(layers: Iterable[LayerInfo]) -> list[str]:
    """Distinct sublayer names of the GEMM layers, in first-seen order (what `sublayer=` accepts)."""
    names = (info.structure.sublayer for info in layers if is_gemm_layer(info) and info.structure.sublayer)
    return list(dict.fromkeys(names))


def _selected(info: LayerInfo, by_layer: dict[str, list[Series]], sublayer: str | None) -> bool:
    if sublayer is not None and info.structure.sublayer != sublayer:
        return False
    if info.name in by_layer:
        return True
    return info.precision is Precision.HIGH and is_gemm_layer(info)


def _row(info: LayerInfo, sublayer: str | None, has_data: bool) -> HeatRow:
    structure = info.structure
    if structure.group is LayerGroup.BODY and structure.index is not None:
        label = f"block {structure.index}" if sublayer else f"{structure.index} {structure.sublayer or ''}".strip()
    else:
        label = structure.sublayer or info.name.rsplit(".", 1)[-1]
    return HeatRow(label, info.name, structure.group.value, ROW_DATA if has_data else ROW_BF16, info.precision.value)


def _spans(names: list[str]) -> list[RowSpan]:
    spans: list[RowSpan] = []
    for k, name in enumerate(names):
        if spans and spans[-1].name == name and spans[-1].stop == k:
            spans[-1] = RowSpan(name, spans[-1].start, k + 1)
        else:
            spans.append(RowSpan(name, k, k + 1))
    return spans
