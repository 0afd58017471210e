"""Parse nvdlfw_inspect statistics logs into per-metric series, fast, with every line accounted for.

Input contract: one or more binary streams (plain or already-decompressed) holding the lines of ONE
rank, fed in session order (older files first). Output: one (iterations, values) pair per distinct
metric name, iterations ascending and unique, plus a report of what was read, skipped and deduplicated.

Line rules (the statistics lines nvdlfw_inspect writes, https://github.com/NVIDIA/nvidia-dlfw-inspect):
* ``<asctime> - <LEVEL> - <name> \\t\\t\\t\\t iteration=<n> \\t\\t\\t\\t value=<v>``; iterations of any length;
  values ``[-+]?digits[.digits]``, ``nan``, ``inf``, ``-inf``; CRLF endings tolerated.
* Blank lines are counted, other non-matching lines are counted as skipped with a few samples kept;
  a file with no statistics line at all is an error (`NoStatsLines`).
* The same (name, iteration) more than once (appended sessions): the last one wins, the rest are counted.
* Sessions. A file fed after others whose first statistics line's iteration is not after the first iteration of
  the earlier files restarted its counter (a resumed run whose debug API counts from 0 again): it is placed after
  them, every iteration of it offset by (the earlier files' last iteration + 1 - its first iteration), so
  nothing a later session shows is overwritten by an earlier one's values at the same iteration numbers.
  `FileReport.iteration_offset` says by how much. A file that starts inside the earlier range (a resume from a
  checkpoint with the same counter) replays those iterations: there the last value wins, as above.

No I/O besides reading the given streams; no web or database imports.

Where the rest lives: reading the streams into blocks of whole lines in policy/parse/stats_blocks.py, scanning a
block with the compiled kernels (and the buffers that takes) in policy/parse/stats_scan.py; this module keeps the
parser's state: the names, the files' reports, sessions, the slow path, and the join in file order.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from fp8_policy.policy.parse import kernels
from fp8_policy.policy.parse.name_table import MAX_NAMES
from fp8_policy.policy.parse.stats_blocks import (
    DEFAULT_BLOCK_BYTES,
    DEFAULT_MAX_LINE_BYTES,
    ByteStream,
    read_blocks,
    recycle,
)
from fp8_policy.policy.parse.stats_names import KnownNames, NamedTable, PieceOrder
from fp8_policy.policy.parse.stats_scan import Grouped, Scratch, Staging, give_back, scan

kernel = kernels.stats  # compiled once loaded in this process, interpreted before (policy/parse/kernels.py)


# The reference regex of a statistics line (as nvdlfw_inspect writes it, `<layer>_<tensor>_<stat>  iteration=N  value=V`); the compiled fast path accepts a subset of it.
# Same matches and groups as the spec's `(?P<name>.+?)\s+iteration=`, but the name may only end where a
# blank run starts (or be one blank), so a long blank run is not re-scanned from each of its characters:
# linear instead of quadratic (a 1 MiB line of blanks took ~15 minutes with the spec's form).
STATS_LINE = re.compile(
    r"^(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3}) - (?P<level>[A-Z]+) - "
    r"(?P<name>\s|.+?(?<=\S))\s+iteration=(?P<iteration>\d+)\s+value=(?P<value>[-+]?(?:\d+(?:\.\d+)?|nan|inf))\s*$"
)

MAX_SAMPLES = 5
_MAX_ITERATION = int(np.iinfo(np.int64).max)
_STATUS_LONG = 3  # set in Python after the kernel: over max_line_bytes, dropped
_Pending = tuple[np.ndarray | None, "Future[Scratch] | None"]  # (None, None): an over-long line, dropped
T = TypeVar("T")


class StatsLogError(ValueError):
    """A statistics log that cannot be used at all (the message names the file)."""


class NoStatsLines(StatsLogError):
    pass


class TooManyMetrics(StatsLogError):
    pass


@dataclass(slots=True)
class FileReport:
    """What one file contributed."""

    source: str
    lines_read: int = 0
    stats_lines: int = 0
    blank_lines: int = 0
    skipped_lines: int = 0
    skipped_samples: list[str] = field(default_factory=list)  # "line N: <text>" of the first few
    iteration_offset: int = 0  # added to every iteration of this file (a restarted session, see module docstring)
    first_iteration: int | None = field(default=None, compare=False)  # the first statistics line's, as logged
    last_iteration: int | None = field(default=None, compare=False)  # the largest, offset applied


@dataclass(slots=True)
class ParsedStats:
    """All series of one rank: series k is names[k], iterations[offsets[k]:offsets[k+1]], values[...]."""

    names: list[str]
    offsets: np.ndarray
    iterations: np.ndarray
    values: np.ndarray
    files: list[FileReport]
    duplicated_points: int

    def series(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = self.offsets[k], self.offsets[k + 1]
        return self.iterations[lo:hi], self.values[lo:hi]

    @property
    def points(self) -> int:
        return int(self.offsets[-1])


def _id_of(table: NamedTable, name: bytes) -> int:
    """The id of `name` in `table`, registered (and its name decoded) when new."""
    before = int(table.counter[0])
    sid = kernels.name_id(table, np.frombuffer(name, dtype=np.uint8))
    if sid < 0:
        raise TooManyMetrics(f"more than {MAX_NAMES} distinct metric names in one rank")
    if sid == before:
        table.names.append(name.decode("utf-8", errors="replace"))
    return sid


class StatsLogParser:
    """Feed the files of one rank in order, then call `finish()`.

    Blocks of whole lines are scanned by the compiled kernel in `workers` threads (it releases the
    GIL) and grouped by series there; results are absorbed strictly in file order, so "last wins" and
    line numbers stay exact. `known`: the names of an earlier parse of the same file (`known_names()`, policy/
    stats_names.py), registered and predicted from the start; the result is the same as without them.
    """

    def __init__(
        self,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        workers: int = 2,
        known: KnownNames | None = None,
    ):
        self.block_bytes = block_bytes
        self.max_line_bytes = max_line_bytes
        self.workers = max(1, workers)
        self._table = known.table if known is not None else NamedTable()
        self._order = PieceOrder() if self._table.names else None  # ids not numbered by this parse: reorder
        self._grouped: list[Grouped] = []  # per absorbed block, in file order (views into staging chunks)
        self._files: list[FileReport] = []
        self._stagings: dict[int, Staging] = {}  # by id() of the scratch set that groups into it
        self._stagings_lock = threading.Lock()
        self._successor = known.successor if known is not None else None  # name predictions (scan_block)
        self._sessions_first: int | None = None  # first iteration of the files fed so far (as logged)
        self._sessions_last: int | None = None  # last iteration of those files (offsets applied)

    def feed(self, stream: ByteStream, source: str) -> FileReport:
        """Parse one file; raises NoStatsLines when it holds no statistics line at all."""
        report = FileReport(source=source)
        pending: deque[_Pending] = deque()
        with ThreadPoolExecutor(self.workers) as pool:
            for index, block in enumerate(read_blocks(stream, self.block_bytes, self.max_line_bytes)):
                if block is None:  # an over-long line was dropped here
                    pending.append((None, None))
                elif index == 0:  # first block registers the names; later ones only look them up
                    self._absorb(block, self._kernel(block, True), report, inserted=True)
                    recycle(block)
                else:
                    pending.append((block, pool.submit(self._kernel, block, False)))
                while len(pending) > self.workers:
                    self._absorb_pending(pending.popleft(), report)
            while pending:
                self._absorb_pending(pending.popleft(), report)
        if report.stats_lines == 0:
            raise NoStatsLines(f"{source}: no statistics line in {report.lines_read} lines")
        self._files.append(report)
        if report.first_iteration is not None and report.last_iteration is not None:
            first, last = self._sessions_first, self._sessions_last
            self._sessions_first = report.first_iteration if first is None else min(first, report.first_iteration)
            self._sessions_last = report.last_iteration if last is None else max(last, report.last_iteration)
        return report

    def _place_session(self, out: Scratch, report: FileReport) -> None:
        """Offset this file's iterations when it restarted the counter (module docstring); decided on the file's
        first statistics line, applied to every block of it."""
        its = out.grouped[1]
        if its.shape[0] == 0:
            return
        if report.first_iteration is None:
            ok = np.flatnonzero(out.status[: out.n] == kernel.STATUS_OK)
            report.first_iteration = int(out.iters[ok[0]]) if ok.size else int(its.min())
            first, last = self._sessions_first, self._sessions_last
            if first is not None and last is not None and report.first_iteration <= first:
                report.iteration_offset = last + 1 - report.first_iteration
        offset = report.iteration_offset
        if offset:
            if int(its.max()) > _MAX_ITERATION - offset:
                raise StatsLogError(
                    f"{report.source}: a restarted session (iterations from {report.first_iteration}) cannot be placed "
                    f"after the earlier sessions' last iteration {self._sessions_last}: iteration {int(its.max())} "
                    "would overflow"
                )
            its += offset
        top = int(its.max())
        report.last_iteration = top if report.last_iteration is None else max(report.last_iteration, top)

    def _kernel(self, buf: np.ndarray, insert: bool) -> Scratch:
        """Scan and group one block (in a pool thread except for the first block) into a scratch set
        (policy/parse/stats_scan.py)."""
        out = scan(buf, self._table, insert, self._successor)
        if insert:  # the first block of a file: later blocks start with its name order as their predictions
            self._successor = out.successor.copy()
        out.group(self._staging_for(out))
        return out

    def _staging_for(self, scratch: Scratch) -> Staging:
        with self._stagings_lock:
            return self._stagings.setdefault(id(scratch), Staging())

    def _absorb_pending(self, item: _Pending, report: FileReport) -> None:
        block, future = item
        if block is None or future is None:
            report.lines_read += 1
            self._skip_long_line(report, report.lines_read)
        else:
            self._absorb(block, future.result(), report)
            recycle(block)

    def _absorb(self, data: np.ndarray, out: Scratch, report: FileReport, inserted: bool = False) -> None:
        n, t = out.n, self._table
        status = out.status[:n]
        changes = self._order is not None and (out.counts[1] or out.counts[2] > self.max_line_bytes)
        before = status.copy() if changes else None  # the kernel's statuses, for PieceOrder
        for k in range(out.first_new, int(t.counter[0])):
            if len(t.names) == k:  # registered by this block's fast path
                t.names.append(bytes(data[out.new_start[k] : out.new_stop[k]]).decode("utf-8", errors="replace"))
        blank, slow, longest = out.counts.tolist()
        changed = False
        if longest > self.max_line_bytes:
            changed = self._drop_long_lines(report, status, out.starts[: n + 1])
            blank = int(np.count_nonzero(status == kernel.STATUS_BLANK))  # a long blank line is dropped, too
        if slow:
            changed |= self._slow_path(data, report, status, out.sids, out.iters, out.vals, out.starts)
        if changed:  # lines the scan grouped were dropped, or the regex took lines it did not: group again
            out.group(self._staging_for(out))
        if self._order is not None:
            self._order.block(out.sids[:n], status, before, inserted, out.grouped[0])
        report.lines_read += n
        report.blank_lines += blank
        report.stats_lines += out.grouped[1].shape[0]
        self._place_session(out, report)
        self._grouped.append(out.grouped)
        give_back(out)

    def _drop_long_lines(self, report: FileReport, status: np.ndarray, starts: np.ndarray) -> bool:
        """Lines longer than max_line_bytes (newline excluded) are dropped and counted, parsed or not.
        Returns whether one of them had been parsed."""
        long_lines = np.flatnonzero(np.diff(starts) - 1 > self.max_line_bytes)
        parsed = bool(np.any(status[long_lines] == kernel.STATUS_OK))
        for idx in long_lines.tolist():
            status[idx] = _STATUS_LONG
            self._skip_long_line(report, report.lines_read + idx + 1)
        return parsed

    def _skip_long_line(self, report: FileReport, line_no: int) -> None:
        report.skipped_lines += 1
        self._sample(report, f"line {line_no}: longer than {self.max_line_bytes} bytes, dropped")

    @staticmethod
    def _sample(report: FileReport, text: str) -> None:
        if len(report.skipped_samples) < MAX_SAMPLES:
            report.skipped_samples.append(text)

    def _slow_path(
        self,
        data: np.ndarray,
        report: FileReport,
        status: np.ndarray,
        sid: np.ndarray,
        its: np.ndarray,
        vals: np.ndarray,
        starts: np.ndarray,
    ) -> bool:
        """Lines the fast path did not take: the reference regex decides; results go back in place.
        Returns whether the regex took any."""
        taken = False
        for idx in np.flatnonzero(status == kernel.STATUS_SLOW).tolist():
            raw = bytes(data[int(starts[idx]) : int(starts[idx + 1])]).rstrip(b"\n")
            text = raw.decode("utf-8", errors="replace").rstrip("\r")
            match = STATS_LINE.match(text)
            if match is None or int(match["iteration"]) > _MAX_ITERATION:  # not storable as int64: garbage
                report.skipped_lines += 1
                self._sample(report, f"line {report.lines_read + idx + 1}: {text[:200]!r}")
                continue
            status[idx] = kernel.STATUS_OK
            sid[idx] = _id_of(self._table, match["name"].encode("utf-8"))
            its[idx] = int(match["iteration"])
            vals[idx] = float(match["value"])
            taken = True
        return taken

    def finish(self) -> ParsedStats:
        """Join the grouped blocks per metric, resolve duplicates (last wins) and sort by iteration."""
        n_series = len(self._table.names)
        counts = np.zeros(n_series, dtype=np.int64)
        for offsets, _its, _vals in self._grouped:
            counts[: offsets.shape[0] - 1] += np.diff(offsets)
        offsets = np.zeros(n_series + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        its = np.empty(int(offsets[-1]), dtype=np.int64)
        vals = np.empty(int(offsets[-1]), dtype=np.float64)
        cursor = offsets[:-1].copy()
        names, placed = self._table.names, offsets
        if self._order is not None:  # series where a fresh parse puts them: each id's points start at its place
            order = self._order.ids(counts)
            names, placed = [names[k] for k in order.tolist()], np.zeros(order.shape[0] + 1, dtype=np.int64)
            np.cumsum(counts[order], out=placed[1:])
            cursor[order] = placed[:-1]

        def copy(first: int, stop: int) -> None:  # every block's part of series [first, stop), in file order
            for block in self._grouped:
                kernel.append_block(*block, cursor, its, vals, first, stop)

        map_series_ranges(offsets, self.workers, copy)  # memory-bound: each thread copies a range of series
        self._grouped = []
        with self._stagings_lock:
            for staging in self._stagings.values():  # read by the join above, by nothing any more
                staging.release()
            self._stagings.clear()
        return _deduplicate(names, placed, its, vals, self._files)

    def known_names(self) -> KnownNames:
        """This parse's names and predictions, for the next parse of the same file (`known`)."""
        return KnownNames(self._table, self._successor)


def series_ranges(offsets: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """[first, stop) ranges of series with about the same number of points each, at most `parts` of them."""
    n_series = offsets.shape[0] - 1
    total = int(offsets[-1])
    cuts = [0]
    for k in range(1, parts):
        cut = int(np.searchsorted(offsets, total * k // parts, side="left"))
        if cuts[-1] < cut < n_series:
            cuts.append(cut)
    cuts.append(n_series)
    return list(zip(cuts[:-1], cuts[1:], strict=True))


# Points a thread of map_series_ranges is given at least: below it starting a thread costs more than the copy or
# summary it would share (0.1-0.5 ms against ~1 ms per 250k points); a parallel job's ranks hold a few thousand
# points each (bench/parallel.py).
MIN_POINTS_PER_THREAD = 1 << 18


def map_series_ranges(offsets: np.ndarray, parts: int, work: Callable[[int, int], T]) -> list[T]:
    """work(first, stop) for each of series_ranges(offsets, parts), one thread each when there are several
    (for kernels that release the GIL), at most one per MIN_POINTS_PER_THREAD points."""
    parts = max(1, min(parts, int(offsets[-1]) // MIN_POINTS_PER_THREAD))
    ranges = series_ranges(offsets, parts)
    if len(ranges) == 1:
        return [work(*ranges[0])]
    with ThreadPoolExecutor(len(ranges)) as pool:
        return list(pool.map(lambda r: work(*r), ranges))


def _deduplicate(
    names: list[str], offsets: np.ndarray, its: np.ndarray, vals: np.ndarray, files: list[FileReport]
) -> ParsedStats:
    """Per series: sort by iteration (stable) and keep the last point of each iteration."""
    duplicated = 0
    unsorted = np.flatnonzero(~kernel.strictly_increasing_series(offsets, its)).tolist()
    if unsorted:  # appended sessions: rebuild, every series in turn (most are copied as they are)
        new_offsets = [0]
        out_it: list[np.ndarray] = []
        out_val: list[np.ndarray] = []
        redo = set(unsorted)
        for k in range(len(names)):
            it, val = its[offsets[k] : offsets[k + 1]], vals[offsets[k] : offsets[k + 1]]
            if k in redo:
                order = np.argsort(it, kind="stable")
                it, val = it[order], val[order]
                keep = np.ones(it.shape[0], dtype=bool)
                keep[:-1] = it[1:] != it[:-1]
                duplicated += int(it.shape[0] - np.count_nonzero(keep))
                it, val = it[keep], val[keep]
            out_it.append(it)
            out_val.append(val)
            new_offsets.append(new_offsets[-1] + it.shape[0])
        its, vals = np.concatenate(out_it), np.concatenate(out_val)
        offsets = np.asarray(new_offsets, dtype=np.int64)
    names = list(names)
    sizes = np.diff(offsets)
    if (sizes == 0).any():  # a name seen only on dropped (over-long) lines has no points: no series
        names = [name for name, size in zip(names, sizes.tolist(), strict=True) if size]
        offsets = np.concatenate(([0], np.cumsum(sizes[sizes > 0]))).astype(np.int64)
    return ParsedStats(names, offsets, its, vals, files, duplicated)
