"""The metrics CSV: column layouts and the text of one series' rows, in bounded chunks.

Belongs here: what the export's rows are (the `long` layout `rank,layer,tensor,recipe,stat,iteration,value`, with
`rank,tp,pp,dp,ep,cp,layer,...` for a parallel job whose layout is known, and
bionemo's `metric_name,iteration,value`, the metric name `<layer>_<tensor>_<stat>` its analyzer builds), and the
fast writer that turns a series' arrays into CSV bytes (`_csv_kernel.write_rows`, numba). Reading the series from
the database is `db/`'s, streaming the response is `service/`'s.

Values are written as the log printed them: ``f"{v:.4f}"``, `nan`, `inf`, `-inf`. A series the kernel cannot
format exactly (a value next to a rounding tie, or beyond 4.5e11) is written by Python's own formatter, so both
paths give the same bytes.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Mapping

import numpy as np

from fp8_policy.policy.parse import kernels

ROW_SLACK = 64  # bytes a row needs besides its prefix: 20-digit iteration, value, separators (_csv_kernel)

LAYOUTS = ("long", "bionemo")
HEADERS = {
    "long": ("rank", "layer", "tensor", "recipe", "stat", "iteration", "value"),
    "bionemo": ("metric_name", "iteration", "value"),
}
# a parallel job's `long` CSV: each row's rank coordinates (policy/parallel/info.py COORD_KEYS), after `rank`
COORD_COLUMNS = ("tp", "pp", "dp", "ep", "cp")
CHUNK_BYTES = 1 << 20  # each yielded piece is about this size: memory stays bounded for any run


def _csv_line(fields: tuple[object, ...]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(fields)
    return buffer.getvalue()


def header(layout: str, coordinates: bool = False) -> bytes:
    """The header line; `coordinates` (a parallel job's `long` CSV): the rank's COORD_COLUMNS after `rank`."""
    columns = HEADERS[layout]
    if coordinates and layout == "long":
        columns = (columns[0], *COORD_COLUMNS, *columns[1:])
    return _csv_line(columns).encode()


def row_prefix(
    layout: str,
    rank: int,
    layer: str,
    tensor: str,
    recipe: str | None,
    stat: str,
    coordinate: Mapping[str, int] | None = None,
) -> bytes:
    """The columns before `iteration`, CSV-quoted as the csv module quotes them, ending in a comma. `coordinate`
    (with `header(..., coordinates=True)`): the rank's tp/pp/dp/ep/cp, empty where not told."""
    fields: tuple[object, ...] = (
        (f"{layer}_{tensor}_{stat}",) if layout == "bionemo" else (rank, layer, tensor, recipe or "", stat)
    )
    if coordinate is not None and layout == "long":
        fields = (rank, *(coordinate.get(k, "") for k in COORD_COLUMNS), *fields[1:])
    return _csv_line((*fields, "")).rstrip("\n").encode()


def _python_rows(prefix: bytes, iterations: np.ndarray, values: np.ndarray) -> bytes:
    head = prefix.decode()
    return "".join(f"{head}{i},{v:.4f}\n" for i, v in zip(iterations.tolist(), values.tolist(), strict=True)).encode()


def series_rows(prefix: bytes, iterations: np.ndarray, values: np.ndarray) -> Iterator[bytes]:
    """CSV rows of one series, in pieces of about CHUNK_BYTES."""
    its = np.ascontiguousarray(iterations, dtype=np.int64)
    vals = np.ascontiguousarray(values, dtype=np.float64)
    head = np.frombuffer(prefix, dtype=np.uint8)
    per_row = len(prefix) + ROW_SLACK
    rows_per_chunk = max(1, CHUNK_BYTES // per_row)
    out = np.empty(min(len(its), rows_per_chunk) * per_row, dtype=np.uint8)
    for start in range(0, len(its), rows_per_chunk):
        stop = min(start + rows_per_chunk, len(its))
        written, bad_row = kernels.csv.write_rows(head, its, vals, start, stop, out)
        if bad_row >= 0:  # rare: let Python format this piece exactly
            yield _python_rows(prefix, its[start:stop], vals[start:stop])
        else:
            yield out[:written].tobytes()
