"""The live trend detectors over many series at once: Theil–Sen projections and rank divergence on a SeriesTable.

Belongs here: `projected_crossing` and `rank_divergence` (policy/live/events.py defines them, per series) for every
candidate row of a piece in array operations: the pairwise slopes of all windows of one length in one matrix,
their medians by sorting rows, the ranks' levels and the median of the others per metric. A row whose arrays
hold something the row-wise shortcut does not reproduce exactly (a NaN where numpy's median would propagate it,
two points at one iteration) goes to the per-series code instead. The event of a row that fires is built by the
per-series code (events._projection; the message of rank_divergence), so texts and numbers are the same.
"""

from __future__ import annotations

import numpy as np

from fp8_policy.policy.live import events as ref
from fp8_policy.policy.live.events import LEVEL_POINTS, MIN_TREND_POINTS, WINDOW, LiveEvent
from fp8_policy.policy.live.table import NO_ITERATION, SeriesTable
from fp8_policy.policy.thresholds import Severity, Thresholds

_CRITICAL = Severity.CRITICAL.rank
_PAIRS: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    pairs = _PAIRS.get(n)
    if pairs is None:
        pairs = _PAIRS[n] = np.triu_indices(n, k=1)
    return pairs


def _row_medians(matrix: np.ndarray) -> np.ndarray:
    """np.median of each row (no NaN in the matrix): the middle of the row partitioned, or the mean of the two
    middle ones as np.median computes it (the lower one is the largest left of the upper one: one partition point,
    which numpy does in about a third of the time of two)."""
    n = matrix.shape[1]
    half = n // 2
    part = np.partition(matrix, half, axis=1)
    if n % 2:
        middle: np.ndarray = part[:, half]
        return middle
    mean: np.ndarray = (part[:, :half].max(axis=1) + part[:, half]) / 2
    return mean


def projections(
    table: SeriesTable,
    rows: np.ndarray,
    thresholds: Thresholds,
    horizon_steps: int,
    bands: tuple[list[Thresholds], np.ndarray] | None = None,
) -> dict[int, LiveEvent]:
    """The projected_crossing event of each underflows% row of `rows` that raises one now (and its state);
    `bands`: the distinct bands and each metric name's index into them (each series' critical bound is its own)."""
    choices, choice = bands if bands is not None else ([thresholds], np.zeros(len(table.names), dtype=np.int64))
    critical_of = np.array([th.critical for th in choices], dtype=np.float64)
    open_rows = rows[
        ~table.projected[rows] & (table.band[rows] < _CRITICAL) & (table.win_len[rows] >= MIN_TREND_POINTS)
    ]
    fired: list[int] = []
    for n in np.unique(table.win_len[open_rows]).tolist():
        group = open_rows[table.win_len[open_rows] == n]
        x = table.win_it[group, WINDOW - n :].astype(np.float64)
        y = table.win_val[group, WINDOW - n :]
        i, j = _pairs(n)
        dx = np.take(x, j, axis=1) - np.take(x, i, axis=1)  # np.take: ~25 % faster than x[:, j] here
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            slopes = (np.take(y, j, axis=1) - np.take(y, i, axis=1)) / dx
            exact = ~((dx == 0).any(axis=1) | np.isnan(slopes).any(axis=1))
            slope = np.zeros(group.shape[0])
            slope[exact] = _row_medians(slopes[exact])
            residuals = y - slope[:, None] * x
            exact &= ~np.isnan(residuals).any(axis=1)
            intercept = np.zeros(group.shape[0])
            intercept[exact] = _row_medians(residuals[exact])
            last_it = x[:, -1]
            rise = slope * (x[:, -1] - x[:, 0])
            crossing = (critical_of[choice[table.name[group]]] - intercept) / slope
            fires = (
                ~(slope <= 0)
                & ~(rise < thresholds.trend_min_rise)
                & ~((crossing <= last_it) | (crossing - last_it > horizon_steps))
            )
        fired += group[exact & fires].tolist() + group[~exact].tolist()
    events: dict[int, LiveEvent] = {}
    for row in sorted(fired):
        state = table.state(row)
        metric = table.metric(row)
        own = choices[int(choice[int(table.name[row])])]
        event = ref._projection(state, metric, int(table.rank[row]), own, horizon_steps, table.label(row))
        if event is not None:
            events[row] = event
            table.projected[row] = True
    return events


def _levels(table: SeriesTable, rows: np.ndarray) -> np.ndarray:
    """events.SeriesState.level of each row (rows with a window): the mean of its last LEVEL_POINTS points."""
    levels = np.empty(rows.shape[0])
    counts = np.minimum(table.win_len[rows], LEVEL_POINTS)
    for n in np.unique(counts).tolist():
        at = np.flatnonzero(counts == n)
        levels[at] = np.mean(np.ascontiguousarray(table.win_val[rows[at], WINDOW - n :]), axis=1)
    return levels


def rank_divergence(table: SeriesTable, touched: np.ndarray, thresholds: Thresholds) -> list[LiveEvent]:
    """events.rank_divergence over the table, for the metrics of the underflows% rows `touched` (this
    piece's): every rank's row of those metrics takes part, in table order."""
    if touched.size == 0:
        return []
    names = np.zeros(len(table.names), dtype=bool)
    names[table.name[touched]] = True
    rows = np.flatnonzero(names[table.name])  # every rank's row of those metrics
    members = rows[table.win_len[rows] > 0]  # the rows with a level
    if members.size == 0:
        return []
    metric_of = table.name[members]
    known = np.bincount(metric_of, minlength=len(table.names))
    members = members[known[metric_of] >= 3]
    if members.size == 0:
        return []
    metric_of = table.name[members]
    levels = _levels(table, members)
    others = _others_median(metric_of, levels)
    with np.errstate(invalid="ignore", over="ignore"):
        gap = np.abs(levels - others)
        high, low = np.maximum(levels, others), np.minimum(levels, others)
        ratio = (high + 1e-9) / (low + 1e-9)
        apart = (gap >= thresholds.rank_outlier_gap) & (ratio >= thresholds.rank_outlier_ratio)
    firing = members[apart & ~table.diverging[members]]
    table.diverging[members] = apart
    if firing.size == 0:
        return []
    # the per-series order: metrics by their first row (with a level or not), then their rows in table order
    first_row = np.full(len(table.names), len(table), dtype=np.int64)
    np.minimum.at(first_row, table.name[rows], rows)
    order = np.lexsort((firing, first_row[table.name[firing]]))
    position = {int(r): k for k, r in enumerate(members.tolist())}
    events = []
    for row in firing[order].tolist():
        k = position[row]
        metric, rank, level, median = table.metric(row), int(table.rank[row]), float(levels[k]), float(others[k])
        last_it = int(table.last_it[row])
        events.append(
            ref._event(
                "rank_divergence",
                Severity.CRITICAL,
                metric,
                rank,
                0 if last_it == NO_ITERATION else last_it,
                level,
                f"{metric.layer} {metric.tensor} {metric.stat_key}: rank {rank} at "
                f"{level:.2f} % while the other ranks' median is {median:.2f} %",
                others_median=median,
                ranks=int(np.count_nonzero(metric_of == metric_of[k])),
            )
        )
    return events


def _others_median(groups: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """For each element, np.median of the levels of its group without it (each group has >= 3 elements)."""
    out = np.empty(levels.shape[0])
    order = np.lexsort((levels, groups))  # by group, then level
    sorted_groups, sorted_levels = groups[order], levels[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_groups[1:] != sorted_groups[:-1])))
    sizes: np.ndarray = np.diff(np.concatenate((starts, [order.shape[0]])))
    start: np.ndarray = np.repeat(starts, sizes)
    size: np.ndarray = np.repeat(sizes, sizes)
    own = np.arange(order.shape[0]) - start  # each element's place in its sorted group
    m: np.ndarray = size - 1  # the others: the group without the element

    def other(index: np.ndarray) -> np.ndarray:  # the index-th of the others, in the group's sorted order
        picked: np.ndarray = sorted_levels[start + index + (index >= own)]
        return picked

    low, high = other((m - 1) // 2), other(m // 2)
    with np.errstate(invalid="ignore", over="ignore"):
        out[order] = np.where(m % 2 == 1, low, (low + high) / 2)
    return out
