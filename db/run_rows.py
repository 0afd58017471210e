"""The typed records that cross between the service and db/runs.py: what a new run stores, what an
ingest counted, and what the run reads return (one name per field, never a positional tuple)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # annotations only: numpy is imported by what computes (not on serve's start-up path)
    import numpy as np
    import numpy.typing as npt


@dataclass(frozen=True, slots=True)
class NewRun:
    name: str | None
    project: str
    tags: tuple[str, ...]
    metadata: dict[str, Any]
    sha256: str
    upload_filename: str | None
    upload_bytes: int
    upload_path: str
    uploaded_by: str | None = None  # the access token's name


@dataclass(frozen=True, slots=True)
class IngestCounts:
    lines_read: int
    lines_skipped: int
    lines_blank: int
    lines_duplicated: int
    report: dict[str, Any]


@dataclass(frozen=True, slots=True)
class LayerStatSummary:
    """One (layer, tensor, stat) summed over the ranks asked for (RunRepository.layer_summaries); the query
    labels its columns with these field names."""

    layer_id: int
    tensor: str
    stat_key: str
    stat: str
    recipe: str | None
    columnwise: bool
    min: float | None
    max: float | None
    mean: float | None
    last: float | None
    p95: float | None
    count: int
    nan_count: int
    inf_count: int
    ranks: int


class SeriesPoints(NamedTuple):
    """One series' decoded points with what names it (RunRepository.iter_points)."""

    rank: int
    layer: str
    tensor: str
    recipe: str | None
    stat_key: str
    iterations: npt.NDArray[np.int64]
    values: npt.NDArray[np.float64]
