"""The live detectors over every series of a piece at once: one pass of array operations per piece, not per series.

Belongs here: feeding a piece's parsed points (policy/parse/stats_log.ParsedStats of one rank: series grouped, iterations
ascending) to the detectors of policy/live/events.py for all its series together, on `SeriesTable`, the detector
state of a whole run as arrays (one row per (rank, metric) series). The events and the state after a piece are
exactly those of `events.advance` called series by series in the piece's series order, then
`events.rank_divergence` (tests/policy/live/test_live_batch.py compares both on random logs split at random
points); Python runs per event raised, never per series or point. Storing the table as one JSON document is
policy/live/table.py's; the trends (Theil–Sen projection, rank levels) policy/live/trends.py's.

The table keeps a window of recent points for underflows% series only: nothing else reads one (the projection and
the rank levels are underflows% detectors).
"""

from __future__ import annotations

import numpy as np

from fp8_policy.policy.analysis.format_bands import UNDECIDED, SeriesBands
from fp8_policy.policy.live import events as ref
from fp8_policy.policy.live.events import WINDOW, LiveEvent
from fp8_policy.policy.live.levels import band_event, level_points
from fp8_policy.policy.live.scales import read_scales
from fp8_policy.policy.live.table import KIND_SCALE, KIND_UNDERFLOW, NO_ITERATION, SeriesTable
from fp8_policy.policy.live.trends import projections, rank_divergence
from fp8_policy.policy.thresholds import Severity, Thresholds

_WARNING, _CRITICAL = Severity.WARNING.rank, Severity.CRITICAL.rank
Choices = tuple[list[Thresholds], np.ndarray]  # the distinct bands, and each metric name's index into them


def advance_piece(
    table: SeriesTable,
    rank: int,
    names: list[str],
    offsets: np.ndarray,
    iterations: np.ndarray,
    values: np.ndarray,
    thresholds: Thresholds,
    horizon_steps: int = ref.DEFAULT_HORIZON_STEPS,
    bands: SeriesBands | None = None,
) -> list[LiveEvent]:
    """Feed one rank's piece (series k = names[k], points offsets[k]:offsets[k+1], iterations ascending within a
    series) and return the events it raises, rank divergence included. `bands`: each series' bands and how its
    scale_inv is read, from the run's metadata (policy/analysis/format_bands.py; default: `thresholds`, NVFP4's for
    `nvfp4_*` stats, scales undecided until their values say)."""
    bands = bands or SeriesBands(thresholds)
    rows = table.rows_for(rank, names)  # -1: a name that is no metric (skipped, as the per-series path does)
    its = np.asarray(iterations, dtype=np.int64)
    vals = np.asarray(values, dtype=np.float64)
    counts: np.ndarray = np.diff(np.asarray(offsets, dtype=np.int64))
    if (rows < 0).any() or (counts == 0).any():
        keep_series = (rows >= 0) & (counts > 0)
        point_keep = np.repeat(keep_series, counts)
        its, vals, rows, counts = its[point_keep], vals[point_keep], rows[keep_series], counts[keep_series]
    if rows.size == 0:
        return []
    seg = np.repeat(np.arange(rows.size), counts)
    its, vals, seg = _read_scales(table, rows, seg, its, vals, bands)  # as events.advance: before new points
    its, vals, seg = _new_points(table, rows, seg, its, vals)
    choice = np.fromiter((bands.index(m) for m in table.metrics), dtype=np.int64, count=len(table.metrics))
    found: list[tuple[int, int, LiveEvent]] = []  # (series position in the piece, point or end, event)
    if its.size:
        found += _point_events(table, rank, rows, seg, its, vals, thresholds, (bands.choices, choice))
    underflow = rows[table.kind[rows] == KIND_UNDERFLOW]
    positions = {int(r): k for k, r in enumerate(rows.tolist())}
    for row, event in projections(table, underflow, thresholds, horizon_steps, (bands.choices, choice)).items():
        found.append((positions[row], its.size + 1, event))
    found.sort(key=lambda item: (item[0], item[1]))
    events = [event for _k, _at, event in found]
    return events + rank_divergence(table, underflow, thresholds)


def _new_points(
    table: SeriesTable, rows: np.ndarray, seg: np.ndarray, its: np.ndarray, vals: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The points newer than every point before them in their series (the stored last iteration included)."""
    row = rows[seg]
    keep = its > table.last_it[row]
    inside = seg[1:] == seg[:-1]
    unordered = inside & (its[1:] <= its[:-1])
    if unordered.any():  # not from the parser (its series are ascending and unique): the per-series rule
        for s in np.unique(seg[1:][unordered]).tolist():
            at = np.flatnonzero(seg == s)
            last = int(table.last_it[rows[s]])
            seen = np.maximum.accumulate(np.concatenate(([last], its[at])))[:-1]
            keep[at] = its[at] > seen
    if keep.all():
        return its, vals, seg
    return its[keep], vals[keep], seg[keep]


def _read_scales(
    table: SeriesTable, rows: np.ndarray, seg: np.ndarray, its: np.ndarray, vals: np.ndarray, bands: SeriesBands
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The scale_inv points read as events.advance reads them (policy/live/scales.py: E8M0 bytes as powers of
    two, impossible bytes out); updates the rows' `form`."""
    scale = table.kind[rows] == KIND_SCALE
    points = scale[seg]
    if not points.any():
        return its, vals, seg
    form = table.form[rows].copy()
    for k in np.flatnonzero(scale & (form == UNDECIDED)).tolist():
        form[k] = bands.scale_form(table.metric(int(rows[k])))
    vals = vals.copy()
    vals[points], keep_scale = read_scales(seg[points], vals[points], form)
    table.form[rows[scale]] = form[scale]
    if keep_scale.all():
        return its, vals, seg
    keep = np.ones(vals.shape, dtype=bool)
    keep[np.flatnonzero(points)[~keep_scale]] = False
    return its[keep], vals[keep], seg[keep]


def _starts(seg: np.ndarray) -> np.ndarray:
    first = np.ones(seg.shape, dtype=bool)
    first[1:] = seg[1:] != seg[:-1]
    return first


def _ends(seg: np.ndarray) -> np.ndarray:
    last = np.ones(seg.shape, dtype=bool)
    last[:-1] = seg[1:] != seg[:-1]
    return last


def _shifted(values: np.ndarray, first: np.ndarray, initial: np.ndarray) -> np.ndarray:
    """Each element's predecessor in its series; `initial` (per first element) before a series' first one."""
    out = np.empty_like(values)
    out[1:] = values[:-1]
    out[first] = initial
    return out


def _point_events(
    table: SeriesTable,
    rank: int,
    rows: np.ndarray,
    seg: np.ndarray,
    its: np.ndarray,
    vals: np.ndarray,
    thresholds: Thresholds,
    bands: Choices,
) -> list[tuple[int, int, LiveEvent]]:
    """nonfinite, scale jumps and band crossings (each series in its own `bands`) of the new points, and the state
    after them."""
    row = rows[seg]
    first, last = _starts(seg), _ends(seg)
    had_last = table.last_it[row[first]] != NO_ITERATION
    previous_its = _shifted(its, first, np.where(had_last, table.last_it[row[first]], -1))
    found: list[tuple[int, int, LiveEvent]] = []
    bad = ~np.isfinite(vals)
    if bad.any():
        prev_bad = _shifted(bad, first, table.nonfinite[row[first]])
        for k in np.flatnonzero(bad & ~prev_bad).tolist():
            metric, it, value = table.metric(int(row[k])), int(its[k]), float(vals[k])
            message = f"{table.label(int(row[k]))}: {value} at iteration {it}"
            event = ref._event("nonfinite", Severity.SEVERE, metric, rank, it, None, message, value_text=str(value))
            found.append((int(seg[k]), k, event))
    at = np.flatnonzero(~bad)
    if at.size:
        good, frow, fseg = vals[at], row[at], seg[at]
        ffirst, flast = _starts(fseg), _ends(fseg)
        before = _shifted(good, ffirst, table.last_value[frow[ffirst]])
        scale = table.kind[frow] == KIND_SCALE
        if scale.any():
            moved = _moved_before(table, frow, fseg, ffirst, good, scale)
            found += _scale_jumps(
                table, rank, thresholds, at, good, before, scale & moved, first, row, seg, its, previous_its
            )
        underflow = np.flatnonzero(table.kind[frow] == KIND_UNDERFLOW)
        if underflow.size:
            found += _bands(table, rank, thresholds, bands, at[underflow], good[underflow], row, seg, its)
        table.last_value[frow[flast]] = good[flast]
    table.nonfinite[row[last]] = bad[last]
    table.last_it[row[last]] = its[last]
    return found


def _moved_before(
    table: SeriesTable, frow: np.ndarray, fseg: np.ndarray, ffirst: np.ndarray, good: np.ndarray, scale: np.ndarray
) -> np.ndarray:
    """Per finite point: had its scale_inv series left exactly 1.0 before it (events' warm-up rule)? Updates
    the table's `moved` for the series."""
    off = (good != 1.0) & scale
    count = np.cumsum(off)
    start = np.flatnonzero(ffirst)
    before_series = np.repeat(count[start] - off[start], np.diff(np.append(start, good.size)))
    moved: np.ndarray = table.moved[frow] | (count - off - before_series > 0)
    ends = _ends(fseg) & scale
    table.moved[frow[ends]] |= moved[ends] | off[ends]
    return moved


def _scale_jumps(
    table: SeriesTable,
    rank: int,
    thresholds: Thresholds,
    at: np.ndarray,
    good: np.ndarray,
    before: np.ndarray,
    scale: np.ndarray,
    first: np.ndarray,
    row: np.ndarray,
    seg: np.ndarray,
    its: np.ndarray,
    previous_its: np.ndarray,
) -> list[tuple[int, int, LiveEvent]]:
    jumps = scale & ref.scale_jumped(good, before, thresholds)
    found = []
    for j in np.flatnonzero(jumps).tolist():
        k = int(at[j])
        r = int(row[k])
        it, value, previous = int(its[k]), float(good[j]), float(before[j])
        # the state's last iteration (None before any point) or the series' previous new point
        previous_it = None if first[k] and table.last_it[r] == NO_ITERATION else int(previous_its[k])
        event = ref.scale_jump_event(table.label(r), table.metric(r), rank, it, value, previous, previous_it)
        found.append((int(seg[k]), k, event))
    return found


def _bands(
    table: SeriesTable,
    rank: int,
    thresholds: Thresholds,
    bands: Choices,
    at: np.ndarray,
    good: np.ndarray,
    row: np.ndarray,
    seg: np.ndarray,
    its: np.ndarray,
) -> list[tuple[int, int, LiveEvent]]:
    """Band crossings of the finite underflows% points `at` (values `good`), their bands, projection resets and
    windows."""
    urow, useg = row[at], seg[at]
    ufirst, ulast = _starts(useg), _ends(useg)
    levels = _levels(table, urow, ufirst, good, level_points(thresholds))
    choices, choice = bands
    own = choice[table.name[urow]]  # each point's series' bands
    ranks = np.zeros(levels.shape, dtype=np.int8)
    for c, th in enumerate(choices):
        ranks[own == c] = ref._band_ranks(levels[own == c], th)
    before = _shifted(ranks, ufirst, table.band[urow[ufirst]])
    found = []
    for j in np.flatnonzero((ranks > before) & (ranks >= _WARNING)).tolist():
        k, r = int(at[j]), int(urow[j])
        band, previous = ref._BY_RANK[int(ranks[j])], ref._BY_RANK[int(before[j])]
        event = band_event(
            table.label(r),
            table.metric(r),
            rank,
            int(its[k]),
            float(levels[j]),
            float(good[j]),
            band,
            previous,
            choices[int(own[j])],
        )
        found.append((int(seg[k]), k, event))
    table.band[urow[ulast]] = ranks[ulast]
    table.projected[np.unique(urow[ranks >= _CRITICAL])] = False
    _extend_windows(table, urow, ufirst, ulast, its[at], good)
    return found


def _levels(table: SeriesTable, urow: np.ndarray, ufirst: np.ndarray, good: np.ndarray, points: int) -> np.ndarray:
    """events.sustained_levels for every series at once: per new finite point, the median of the last `points`
    finite points of its series (its earlier new points, then the newest of its stored window); NaN while fewer."""
    start = np.flatnonzero(ufirst)
    position = np.arange(good.size) - np.repeat(start, np.diff(np.append(start, good.size)))  # within its series
    back = np.arange(points)[None, :]  # 0: the point itself, 1: the one before, ...
    from_new = back <= position[:, None]
    older = back - position[:, None]  # 1: the newest window point, ...
    have = table.win_len[urow].astype(np.int64)[:, None]
    window = np.take_along_axis(table.win_val[urow], np.clip(WINDOW - older, 0, WINDOW - 1), 1)
    values = np.where(from_new, good[np.maximum(np.arange(good.size)[:, None] - back, 0)], window)
    valid = (from_new | (older <= have)).all(axis=1)
    levels = np.median(values, axis=1) if good.size else np.zeros(0)
    levels[~valid] = np.nan
    return levels


def _extend_windows(
    table: SeriesTable, urow: np.ndarray, ufirst: np.ndarray, ulast: np.ndarray, its: np.ndarray, good: np.ndarray
) -> None:
    """Each series' window becomes the last WINDOW of (its window + its new finite points); windows are kept
    right-aligned (the newest point in the last column)."""
    rows = urow[ulast]
    start = np.flatnonzero(ufirst)
    fresh = np.flatnonzero(ulast) + 1 - start
    old = table.win_len[rows].astype(np.int64)
    total = old + fresh
    col = np.arange(WINDOW)[None, :]
    place = total[:, None] - WINDOW + col  # position in (old window + fresh points) of each new column
    old_col = np.minimum(col + fresh[:, None], WINDOW - 1)
    new_at = np.clip(start[:, None] + place - old[:, None], 0, its.shape[0] - 1)
    from_new = place >= old[:, None]
    win_it = np.where(from_new, its[new_at], np.take_along_axis(table.win_it[rows], old_col, 1))
    win_val = np.where(from_new, good[new_at], np.take_along_axis(table.win_val[rows], old_col, 1))
    valid = place >= 0
    table.win_it[rows] = np.where(valid, win_it, 0)
    table.win_val[rows] = np.where(valid, win_val, 0.0)
    table.win_len[rows] = np.minimum(total, WINDOW)
