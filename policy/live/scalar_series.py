"""A run's training scalars (`scalars.jsonl`) read into columns once, then served as the last N steps of each series.

A read of a run's scalars used to parse the whole file into one dict per line, then build the answer for the
`limit` asked for: a 32 MiB file took 3-4 s of CPU and some 200 MB each time, and every distinct `limit=` parsed
again. Here a file is parsed once into compact columns (per series: the record's place in step order, its step,
its value: 20 bytes a point) that the caller keeps (service/scalars/actions.py), and each request slices them
(`ScalarColumns.last`), which costs only its answer.

The rules are those of every scalars read (policy/live/scalar_events.py, policy/parse/scalars_file.py): a line is a record
when it is a JSON object with an integer `step` of 0 or more; in step order, a step logged again (a job resumed
from an earlier checkpoint) counts by its last record; a series keeps the records whose value is a finite number.
At most the last MAX_SCALARS_LINES lines are read: a file of millions of tiny lines within the byte bound (a
"line-count bomb") costs no more than the largest file of real records.

Pure: numpy and the standard library only.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fp8_policy.policy.live.scalar_events import SCALAR_KEYS
from fp8_policy.policy.parse.scalars_file import MAX_SCALARS_LINES, is_negative_step, last_lines_start, record_of


@dataclass(frozen=True, slots=True)
class Column:
    positions: np.ndarray  # int64: the record's place among the run's records in step order
    steps: np.ndarray  # int64
    values: np.ndarray  # float64, finite


@dataclass(frozen=True, slots=True)
class ScalarColumns:
    records: int  # distinct steps
    unreadable: int
    negative_steps: int
    series: dict[str, Column] = field(default_factory=dict)
    found: bool = True  # False: the run has no scalars file at all

    @property
    def points(self) -> int:
        return sum(int(column.steps.size) for column in self.series.values())

    def last(self, limit: int) -> dict[str, Any]:
        """The answer of a scalars read: the records of the last `limit` steps, as {name: {steps, values}}."""
        if not self.found:
            return {"records": 0, "series": {}}
        cut = self.records - limit
        series: dict[str, dict[str, list[Any]]] = {}
        for name, column in self.series.items():
            start = int(np.searchsorted(column.positions, cut)) if cut > 0 else 0
            if start < column.steps.size:
                series[name] = {"steps": column.steps[start:].tolist(), "values": column.values[start:].tolist()}
        return {
            "records": min(self.records, limit),
            "unreadable_lines": self.unreadable,
            "negative_steps": self.negative_steps,
            "series": series,
        }


NO_SCALARS = ScalarColumns(0, 0, 0, {}, found=False)


def parse_scalars(text: bytes) -> ScalarColumns:
    """The columns of a scalars file's bytes (whole lines; the last MAX_SCALARS_LINES of them)."""
    steps = array("q")
    ordinals: dict[str, array[int]] = {key: array("q") for key in SCALAR_KEYS}
    values: dict[str, array[float]] = {key: array("d") for key in SCALAR_KEYS}
    unreadable = negative = 0
    start = last_lines_start(text, MAX_SCALARS_LINES)
    size = len(text)
    while start < size:
        end = text.find(b"\n", start)
        end = size if end < 0 else end
        raw = text[start:end]
        start = end + 1
        if not raw.strip():
            continue
        record = record_of(raw)
        if record is None:
            unreadable += 1
            continue
        if is_negative_step(record):
            negative += 1
            continue
        ordinal = len(steps)
        steps.append(int(record["step"]))
        for key in SCALAR_KEYS:
            value = record.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                ordinals[key].append(ordinal)
                values[key].append(float(value))
    return _columns(np.frombuffer(steps, dtype=np.int64), ordinals, values, unreadable, negative)


def _columns(
    steps: np.ndarray,
    ordinals: dict[str, array[int]],
    values: dict[str, array[float]],
    unreadable: int,
    negative: int,
) -> ScalarColumns:
    if not steps.size:
        return ScalarColumns(0, unreadable, negative)
    order = np.lexsort((np.arange(steps.size), steps))  # by step, then by line
    sorted_steps = steps[order]
    last_of_step = np.append(sorted_steps[1:] != sorted_steps[:-1], True)
    kept = order[last_of_step]  # each step's last record, in step order
    place = np.full(steps.size, -1, dtype=np.int64)
    place[kept] = np.arange(kept.size)
    series: dict[str, Column] = {}
    for key in SCALAR_KEYS:
        if not ordinals[key]:
            continue
        ords = np.frombuffer(ordinals[key], dtype=np.int64)
        vals = np.frombuffer(values[key], dtype=np.float64)
        positions = place[ords]
        mine = positions >= 0
        by_place = np.argsort(positions[mine], kind="stable")
        series[key] = Column(positions[mine][by_place], steps[ords[mine]][by_place], vals[mine][by_place].copy())
    return ScalarColumns(int(kept.size), unreadable, negative, series)
