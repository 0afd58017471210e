"""The live detectors' state of a whole run as arrays: one row per (rank, metric) series, stored as one document.

Belongs here: `SeriesTable` (what events.SeriesState holds for one series, for every series of a run at
once), finding or adding the rows of a piece's series, and the table as a JSON-able document (names as a list,
each column as base64 of its raw little-endian bytes: one json.loads and a few frombuffer calls per piece, where
a document of per-series lists cost ~0.3 s for 1,600 series). The detectors that read and write it are
policy/live/batch.py's and policy/live/trends.py's; where the document is stored is db/'s.

A document in the earlier form (one `events.SeriesState.to_dict()` per "<rank>\\t<name>" key) is read too,
so a run that was live across an upgrade keeps its state.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from fp8_policy.policy.live.events import WINDOW, SeriesState, _is_scale_inv, _is_underflow
from fp8_policy.policy.names import split_metric_name
from fp8_policy.policy.records import MetricName
from fp8_policy.policy.thresholds import Severity

KIND_OTHER, KIND_UNDERFLOW, KIND_SCALE = 0, 1, 2
NO_ITERATION = int(np.iinfo(np.int64).min)  # last_it of a series with no point yet (SeriesState's None)
FORMAT = 1
_COLUMNS = {  # name -> dtype of the per-row columns (windows are stored for underflows% rows only)
    "rank": np.int64,
    "name": np.int32,
    "last_it": np.int64,
    "last_value": np.float64,
    "band": np.int8,
    "projected": np.bool_,
    "nonfinite": np.bool_,
    "diverging": np.bool_,
    "win_len": np.int16,
    "moved": np.bool_,  # a scale_inv series has left exactly 1.0 (events.SeriesState.moved)
    "form": np.int8,  # how a scale_inv series is read (events.SeriesState.form, policy/live/scales.py)
}
_ADDED_COLUMNS = ("moved", "form")  # absent from documents written before them: all False / undecided
_METRICS: dict[str, tuple[MetricName, int] | None] = {}  # the names seen by this process: (metric, kind)
_MAX_CACHED = 200_000


def metric_of(name: str) -> tuple[MetricName, int] | None:
    """split_metric_name of `name` and its kind (KIND_*), or None when it is no metric name (kept per process:
    a piece names every series of its rank)."""
    known = _METRICS.get(name, False)
    if known is False:
        if len(_METRICS) >= _MAX_CACHED:
            _METRICS.clear()
        metric = split_metric_name(name)
        known = _METRICS[name] = None if metric is None else (metric, _kind(metric))
    return known  # type: ignore[return-value]


def _kind(metric: MetricName) -> int:
    return KIND_UNDERFLOW if _is_underflow(metric) else KIND_SCALE if _is_scale_inv(metric) else KIND_OTHER


class SeriesTable:
    """Per-row columns (numpy arrays of equal length), the window of recent finite points (win_it/win_val, right-
    aligned: a row's win_len newest points in its last columns) and the metric names rows refer to."""

    def __init__(self) -> None:
        self.names: list[str] = []  # distinct metric names (the `name` column indexes this)
        self.metrics: list[MetricName] = []
        self.name_kind = np.zeros(0, dtype=np.int8)
        self._name_ids: dict[str, int] = {}
        self._new_kinds: list[int] = []  # kinds of the names added by rows_for, until it extends name_kind
        self._by_rank: dict[int, np.ndarray] = {}  # rank -> row of each name id (_rank_rows)
        for column, dtype in _COLUMNS.items():
            setattr(self, column, np.zeros(0, dtype=dtype))
        self.rank: np.ndarray
        self.name: np.ndarray
        self.last_it: np.ndarray
        self.last_value: np.ndarray
        self.band: np.ndarray
        self.projected: np.ndarray
        self.nonfinite: np.ndarray
        self.diverging: np.ndarray
        self.win_len: np.ndarray
        self.moved: np.ndarray
        self.form: np.ndarray
        self.win_it = np.zeros((0, WINDOW), dtype=np.int64)
        self.win_val = np.zeros((0, WINDOW), dtype=np.float64)

    def __len__(self) -> int:
        return int(self.rank.shape[0])

    @property
    def kind(self) -> np.ndarray:
        kinds: np.ndarray = self.name_kind[self.name]
        return kinds

    def metric(self, row: int) -> MetricName:
        return self.metrics[int(self.name[row])]

    def label(self, row: int) -> str:
        """How events name the series (as events.advance does)."""
        metric = self.metric(row)
        return f"{metric.layer} {metric.tensor} {metric.stat_key} (rank {int(self.rank[row])})"

    def _name_id(self, name: str) -> int:
        nid = self._name_ids.get(name)
        if nid is None:
            known = metric_of(name)
            if known is None:
                return -1
            nid = self._name_ids[name] = len(self.names)
            self.names.append(name)
            self.metrics.append(known[0])
            self._new_kinds.append(known[1])
        return nid

    def rows_for(self, rank: int, names: list[str]) -> np.ndarray:
        """The row of each (rank, name) (names distinct), added in order where new; -1 for a name that is no
        metric."""
        ids = self._name_ids
        nids = np.fromiter((ids.get(name, -1) for name in names), dtype=np.int64, count=len(names))
        if (nids < 0).any():
            for k in np.flatnonzero(nids < 0).tolist():
                nids[k] = self._name_id(names[k])
            if self._new_kinds:
                self.name_kind = np.concatenate((self.name_kind, np.asarray(self._new_kinds, dtype=np.int8)))
                self._new_kinds = []
        lookup = self._rank_rows(rank)
        out = np.where(nids >= 0, lookup[np.maximum(nids, 0)], -1)
        new = np.flatnonzero((nids >= 0) & (out < 0))
        if new.size:
            out[new] = len(self) + np.arange(new.size)
            lookup[nids[new]] = out[new]
            self._grow(rank, nids[new].astype(np.int32))
        return out

    def _rank_rows(self, rank: int) -> np.ndarray:
        """name id -> row of `rank` (-1: none yet), as long as `names`."""
        lookup = self._by_rank.get(rank)
        if lookup is None:
            mine = np.flatnonzero(self.rank == rank)
            lookup = np.full(len(self.names), -1, dtype=np.int64)
            lookup[self.name[mine]] = mine
        elif lookup.shape[0] < len(self.names):
            lookup = np.concatenate((lookup, np.full(len(self.names) - lookup.shape[0], -1, dtype=np.int64)))
        self._by_rank[rank] = lookup
        return lookup

    def _grow(self, rank: int, nids: np.ndarray) -> None:
        m = nids.shape[0]
        fresh: dict[str, np.ndarray] = {column: np.zeros(m, dtype=dtype) for column, dtype in _COLUMNS.items()}
        fresh["rank"][:] = rank
        fresh["name"][:] = nids
        fresh["last_it"][:] = NO_ITERATION
        fresh["last_value"][:] = np.nan
        for column, values in fresh.items():
            setattr(self, column, np.concatenate((getattr(self, column), values)))
        self.win_it = np.concatenate((self.win_it, np.zeros((m, WINDOW), dtype=np.int64)))
        self.win_val = np.concatenate((self.win_val, np.zeros((m, WINDOW), dtype=np.float64)))

    def state(self, row: int) -> SeriesState:
        """One row as the per-series detectors' state (events.SeriesState)."""
        n = int(self.win_len[row])
        window = [
            [int(i), float(v)]
            for i, v in zip(
                self.win_it[row, WINDOW - n :].tolist(), self.win_val[row, WINDOW - n :].tolist(), strict=True
            )
        ]
        last_it = int(self.last_it[row])
        value = float(self.last_value[row])
        return SeriesState(
            None if last_it == NO_ITERATION else last_it,
            None if np.isnan(value) else value,
            _BAND_VALUES[int(self.band[row])],
            bool(self.projected[row]),
            bool(self.nonfinite[row]),
            bool(self.diverging[row]),
            window,
            bool(self.moved[row]),
            int(self.form[row]),
        )

    def set_state(self, row: int, state: SeriesState) -> None:
        self.last_it[row] = NO_ITERATION if state.last_iteration is None else state.last_iteration
        self.last_value[row] = np.nan if state.last_value is None else state.last_value
        self.band[row] = Severity(state.band).rank
        self.projected[row], self.nonfinite[row], self.diverging[row] = (
            state.projected,
            state.nonfinite,
            state.diverging,
        )
        self.moved[row] = state.moved
        self.form[row] = state.form
        window = state.window[-WINDOW:] if self.kind[row] == KIND_UNDERFLOW else []
        self.win_len[row] = len(window)
        self.win_it[row], self.win_val[row] = 0, 0.0
        if window:
            self.win_it[row, WINDOW - len(window) :] = [int(i) for i, _v in window]
            self.win_val[row, WINDOW - len(window) :] = [float(v) for _i, v in window]

    # --- the stored document ------------------------------------------------------------------------------------
    def to_document(self) -> dict[str, Any]:
        underflow = np.flatnonzero(self.kind == KIND_UNDERFLOW)
        columns = {column: _b64(getattr(self, column)) for column in _COLUMNS}
        columns["win_rows"] = _b64(underflow.astype(np.int64))
        columns["win_it"] = _b64(self.win_it[underflow])
        columns["win_val"] = _b64(self.win_val[underflow])
        # the names as one string (a log line holds no newline): one string to encode and decode, not 1,600
        return {"format": FORMAT, "names": "\n".join(self.names), "columns": columns}

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> SeriesTable:
        table = cls()
        names = doc["names"]
        table.names = (names.split("\n") if names else []) if isinstance(names, str) else [str(n) for n in names]
        table._name_ids = {name: nid for nid, name in enumerate(table.names)}
        cached = _METRICS.get
        known = [cached(name) or metric_of(name) for name in table.names]
        if None in known or len(table._name_ids) != len(table.names):
            raise ValueError("live state document: its names are not distinct metric names")
        table.metrics = [k[0] for k in known if k is not None]
        table.name_kind = np.asarray([k[1] for k in known if k is not None], dtype=np.int8)
        columns = doc["columns"]
        rows = _array(columns["rank"], np.int64).shape[0]
        for column, dtype in _COLUMNS.items():
            missing = column in _ADDED_COLUMNS and column not in columns
            setattr(table, column, np.zeros(rows, dtype=dtype) if missing else _array(columns[column], dtype))
        n = len(table)
        if any(getattr(table, column).shape[0] != n for column in _COLUMNS):
            raise ValueError("live state columns of different lengths")
        table.win_it = np.zeros((n, WINDOW), dtype=np.int64)
        table.win_val = np.zeros((n, WINDOW), dtype=np.float64)
        win_rows = _array(columns["win_rows"], np.int64)
        table.win_it[win_rows] = _array(columns["win_it"], np.int64).reshape(-1, WINDOW)
        table.win_val[win_rows] = _array(columns["win_val"], np.float64).reshape(-1, WINDOW)
        return table

    @classmethod
    def from_stored(cls, stored: dict[str, Any], key: str) -> SeriesTable:
        """The table in `stored[key]`, or built from the earlier per-series keys ("<rank>\\t<name>")."""
        doc = stored.get(key)
        if isinstance(doc, dict) and doc.get("format") == FORMAT:
            return cls.from_document(doc)
        table = cls()
        for series_key, data in stored.items():
            rank_text, tab, name = series_key.partition("\t")
            if tab and isinstance(data, dict):
                row = int(table.rows_for(int(rank_text), [name])[0])
                if row >= 0:
                    table.set_state(row, SeriesState.from_dict(data))
        return table


_BAND_VALUES = {severity.rank: severity.value for severity in Severity}


def _b64(array: np.ndarray) -> str:
    return base64.b64encode(array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()).decode()


def _array(text: str, dtype: Any) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype)
