"""One metric of several runs on one iteration axis: the compare page's overlay (a layer's tensor stat, or a
training scalar such as the loss), one line per run.

Rules:
* A run's series over ranks is the maximum per iteration (as the heatmap's default): the worst rank decides; NaN
  only where every rank logged NaN there.
* Runs align on the iteration (or step) number as logged: the axis is the sorted union of every run's iterations,
  and a run has no value (None) where it logged none. Values stay as logged (NaN and ±inf included).
* More than `max_points` iterations: the axis is cut into `max_points` consecutive groups; a group is named by its
  first iteration and a run's value there is the mean of its finite values in the group (NaN when it logged only
  non-finite values there, None when nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MAX_POINTS = 4000


@dataclass(frozen=True, slots=True)
class Overlay:
    iterations: list[int]  # the shared axis (a group's first iteration when downsampled)
    values: list[list[float | None]]  # per run, one entry per axis point; None: not logged there
    points: list[int]  # per run, how many points it logged
    grouped: int  # 1: every iteration as logged; n: up to n iterations per axis point


def max_over_ranks(series: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """(iterations, values) of several ranks' series -> one series: the max over ranks per iteration."""
    if not series:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    if len(series) == 1:
        its, vals = series[0]
        return np.asarray(its, dtype=np.int64), np.asarray(vals, dtype=np.float64)
    its = np.unique(np.concatenate([np.asarray(s[0], dtype=np.int64) for s in series]))
    out = np.full(its.size, np.nan)
    for rank_its, rank_vals in series:
        where = np.searchsorted(its, np.asarray(rank_its, dtype=np.int64))
        current = out[where]
        out[where] = np.fmax(current, np.asarray(rank_vals, dtype=np.float64))  # fmax: NaN loses to a number
    return its, out


def align(runs: Sequence[tuple[np.ndarray, np.ndarray] | None], max_points: int = MAX_POINTS) -> Overlay:
    """Each run's (iterations, values), or None for a run without the metric, on one shared axis."""
    present = [np.asarray(r[0], dtype=np.int64) for r in runs if r is not None]
    axis = np.unique(np.concatenate(present)) if present else np.zeros(0, dtype=np.int64)
    points = [0 if r is None else int(np.asarray(r[0]).size) for r in runs]
    groups = max(1, -(-axis.size // max_points)) if max_points > 0 else 1
    starts = np.arange(0, axis.size, groups)
    values: list[list[float | None]] = []
    for run in runs:
        if run is None:
            values.append([None] * starts.size)
            continue
        its, vals = np.asarray(run[0], dtype=np.int64), np.asarray(run[1], dtype=np.float64)
        where = np.searchsorted(axis, its)
        if groups == 1:
            row: list[float | None] = [None] * axis.size
            for k, v in zip(where.tolist(), vals.tolist(), strict=True):
                row[k] = v
            values.append(row)
            continue
        values.append(_grouped(where // groups, vals, starts.size))
    return Overlay(axis[starts].tolist(), values, points, groups)


def _grouped(group: np.ndarray, vals: np.ndarray, count: int) -> list[float | None]:
    finite = np.isfinite(vals)
    logged = np.bincount(group, minlength=count)
    n = np.bincount(group[finite], minlength=count)
    total = np.bincount(group[finite], weights=vals[finite], minlength=count)
    out: list[float | None] = []
    for k in range(count):
        if logged[k] == 0:
            out.append(None)
        elif n[k] == 0:
            out.append(float("nan"))
        else:
            out.append(float(total[k] / n[k]))
    return out
