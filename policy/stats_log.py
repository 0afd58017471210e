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
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, runtime_checkable

import numpy as np

from fp8_policy.policy import kernels
from fp8_policy.policy._name_kernel import MAX_NAMES, NameTable
from fp8_policy.policy.buffer_pool import FreeList

kernel = kernels.stats  # compiled once loaded in this process, interpreted before (policy/kernels.py)

# The reference regex of a statistics line (as nvdlfw_inspect writes it, `<layer>_<tensor>_<stat>  iteration=N  value=V`); the compiled fast path accepts a subset of it.
# Same matches and groups as the spec's `(?P<name>.+?)\s+iteration=`, but the name may only end where a
# blank run starts (or be one blank), so a long blank run is not re-scanned from each of its characters:
# linear instead of quadratic (a 1 MiB line of blanks took ~15 minutes with the spec's form).
STATS_LINE = re.compile(
    r"^(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3}) - (?P<level>[A-Z]+) - "
    r"(?P<name>\s|.+?(?<=\S))\s+iteration=(?P<iteration>\d+)\s+value=(?P<value>[-+]?(?:\d+(?:\.\d+)?|nan|inf))\s*$"
)

DEFAULT_BLOCK_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_LINE_BYTES = 1024 * 1024
MAX_SAMPLES = 5
_MAX_ITERATION = int(np.iinfo(np.int64).max)
_STATUS_LONG = 3  # set in Python after the kernel: over max_line_bytes, dropped
_LIT_ITER = np.frombuffer(b"iteration=", dtype=np.uint8)
_LIT_VALUE = np.frombuffer(b"value=", dtype=np.uint8)
# A block's points grouped by series id: offsets, iterations, values (see kernel.group_block)
_Grouped = tuple[np.ndarray, np.ndarray, np.ndarray]
_Pending = tuple[np.ndarray | None, "Future[_Scratch] | None"]  # (None, None): an over-long line, dropped
T = TypeVar("T")
_STAGING_POINTS = 1024 * 1024  # points per staging chunk (8 MiB of iterations, 8 MiB of values)
_EXPECTED_LINE_BYTES = 80  # scratch sets are sized for blocks of lines this long on average (real ones: ~140)


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


class ReadsBytes(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


@runtime_checkable
class ReadsInto(Protocol):
    def readinto(self, buffer: memoryview, /) -> int | None: ...


# What the parser reads from: a binary stream's read(n), or its readinto (one copy less) when it has one.
ByteStream = ReadsInto | ReadsBytes


def _readinto_of(stream: ByteStream) -> Callable[[memoryview], int | None]:
    """The stream's readinto, or one made from its read(n) (a copy more)."""
    if isinstance(stream, ReadsInto):
        return stream.readinto

    def readinto(view: memoryview) -> int:
        chunk = stream.read(len(view))
        view[: len(chunk)] = chunk
        return len(chunk)

    return readinto


def _read_into(stream: ByteStream, view: memoryview) -> int:
    """Fill `view` as far as the stream allows (readinto may return short reads)."""
    filled = 0
    readinto = _readinto_of(stream)
    while filled < len(view):
        got = readinto(view[filled:])
        if not got:
            break
        filled += got
    return filled


class _NameTable(NameTable):
    """The compiled name table plus the decoded names, in id order."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def id_of(self, name: bytes) -> int:
        before = int(self.counter[0])
        sid = kernels.name_id(self, np.frombuffer(name, dtype=np.uint8))
        if sid < 0:
            raise TooManyMetrics(f"more than {MAX_NAMES} distinct metric names in one rank")
        if sid == before:
            self.names.append(name.decode("utf-8", errors="replace"))
        return sid


class _Staging:
    """Where grouped points wait for `finish`: large chunks filled in order (huge pages, no per-block
    allocation); a block's points are grouped straight into the space `reserve` hands out. The chunks come
    from, and go back to, the process's free list (`release`, once nothing reads them)."""

    def __init__(self) -> None:
        self.chunks: list[tuple[np.ndarray, np.ndarray]] = []
        self.its, self.vals = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)  # the chunk being filled
        self.used = 0

    def reserve(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Room for up to n points (views); `commit` then says how many were written."""
        if self.used + n > self.its.shape[0]:
            size = max(_STAGING_POINTS, n)
            chunk = _STAGING_CHUNKS.take(size) or (np.empty(size, np.int64), np.empty(size, np.float64))
            self.chunks.append(chunk)
            (self.its, self.vals), self.used = chunk, 0
        return self.its[self.used : self.used + n], self.vals[self.used : self.used + n]

    def commit(self, n: int) -> None:
        self.used += n

    def release(self) -> None:
        """Give every chunk back; nothing may read the views handed out any more."""
        for chunk in self.chunks:
            _STAGING_CHUNKS.give(chunk)
        self.chunks = []
        self.its, self.vals, self.used = self.its[:0], self.vals[:0], 0


class _Scratch:
    """The kernels' outputs for one block, reused from block to block (a block's results stay here until it
    is absorbed). One backing buffer per set: fresh memory page-faults on its first touch, and a buffer of a
    few MiB gets transparent huge pages (NumPy asks for them from 4 MiB), so a reused or huge-paged set
    costs a few faults where per-block arrays cost tens of thousands on the 6M-line benchmark.

    A parse groups each set's blocks into staging of its own for that set (StatsLogParser._staging_for), in
    whichever thread holds the set: the grouped points are written once, where `finish` reads them, and never
    copied by the feeding thread."""

    def __init__(self, lines: int) -> None:
        self.lines = lines
        m = lines + 1
        wide = np.empty(3 * m + 3 * MAX_NAMES, dtype=np.int64)
        small = np.empty(5 * m, dtype=np.uint8)
        self._backing = (wide, small)
        self.starts, self.iters = wide[:m], wide[m : 2 * m]
        self.vals = wide[2 * m : 3 * m].view(np.float64)
        names = wide[3 * m :]
        self.new_start, self.new_stop = names[:MAX_NAMES], names[MAX_NAMES : 2 * MAX_NAMES]
        self.successor = names[2 * MAX_NAMES :]
        self.sids, self.status = small[: 4 * m].view(np.int32)[:lines], small[4 * m : 5 * m - 1].view(np.int8)
        self.counts = np.zeros(3, dtype=np.int64)  # blank lines, slow-path lines, longest line (kernel.scan_block)
        self.n = 0  # lines of the block last scanned here
        self.first_new = 0
        self.grouped: _Grouped = (np.zeros(1, dtype=np.int64), np.empty(0, np.int64), np.empty(0, np.float64))

    def touch(self) -> None:
        """Write every page once (prefault_buffers)."""
        for backing in self._backing:
            backing.fill(0)

    def start(self, successor: np.ndarray | None) -> None:
        """Before a block: no name registered yet, nothing counted; name predictions from `successor`."""
        self.new_stop[:] = 0
        self.counts[:] = 0
        if successor is None:
            self.successor[:] = -1
        else:
            self.successor[:] = successor

    def take_over(self, smaller: _Scratch, lines: int) -> None:
        """Continue a block `smaller` ran out of room for: its first `lines` lines, counts and name arrays."""
        for mine, theirs in (
            (self.status, smaller.status),
            (self.sids, smaller.sids),
            (self.iters, smaller.iters),
            (self.vals, smaller.vals),
            (self.starts, smaller.starts),
        ):
            mine[:lines] = theirs[:lines]
        self.counts[:] = smaller.counts
        self.new_start[:], self.new_stop[:], self.successor[:] = smaller.new_start, smaller.new_stop, smaller.successor

    def group(self, staging: _Staging) -> None:
        """Group the OK lines of the block last scanned here by series (kernel.group_block) into `staging`."""
        its, vals = staging.reserve(self.n)
        offsets, points = kernel.group_block(self.status, self.sids, self.iters, self.vals, self.n, its, vals)
        staging.commit(points)
        self.grouped = (offsets, its[:points], vals[:points])


def _expected_lines(block_bytes: int) -> int:
    """Lines a scratch set is taken for, for a block of `block_bytes` (more fit: kernel.scan_block resumes)."""
    return block_bytes // _EXPECTED_LINE_BYTES + 64


def _scratch_lines(lines: int) -> int:
    return max(lines, 1024) * 5 // 4  # room for the next blocks' usual spread


# Buffers kept between parses in this process (policy/buffer_pool.py); a parse with `workers` scan threads has
# about `workers + 2` block buffers and scratch sets in flight, and staging for all its points until `finish`.
_READ_BUFFERS: FreeList[np.ndarray] = FreeList(6, lambda buf: int(buf.shape[0]))
_SCRATCH_SETS: FreeList[_Scratch] = FreeList(6, lambda scratch: scratch.lines)
_STAGING_CHUNKS: FreeList[tuple[np.ndarray, np.ndarray]] = FreeList(12, lambda chunk: int(chunk[0].shape[0]))


def prefault_buffers(workers: int = 2, staging_points: int = 8 * _STAGING_POINTS) -> None:
    """Put one parse's buffers (`workers` scan threads, `staging_points` points staged) in the free lists, every
    page touched: for a serving process's start-up, so its first ingest does not page-fault them in (see
    policy/buffer_pool.py). About 250 MB resident with the defaults."""
    for _ in range(workers + 2):
        buf = np.empty(DEFAULT_BLOCK_BYTES + DEFAULT_MAX_LINE_BYTES, dtype=np.uint8)
        buf.fill(0)
        _READ_BUFFERS.give(buf)
        scratch = _Scratch(_scratch_lines(_expected_lines(DEFAULT_BLOCK_BYTES)))
        scratch.touch()
        _SCRATCH_SETS.give(scratch)
    for _ in range(max(1, staging_points // _STAGING_POINTS)):
        its, vals = np.empty(_STAGING_POINTS, np.int64), np.empty(_STAGING_POINTS, np.float64)
        its.fill(0)  # np.zeros would leave the pages untouched (calloc)
        vals.fill(0)
        _STAGING_CHUNKS.give((its, vals))


class StatsLogParser:
    """Feed the files of one rank in order, then call `finish()`.

    Blocks of whole lines are scanned by the compiled kernel in `workers` threads (it releases the
    GIL) and grouped by series there; results are absorbed strictly in file order, so "last wins" and
    line numbers stay exact.
    """

    def __init__(
        self,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        workers: int = 2,
    ):
        self.block_bytes = block_bytes
        self.max_line_bytes = max_line_bytes
        self.workers = max(1, workers)
        self._table = _NameTable()
        self._grouped: list[_Grouped] = []  # per absorbed block, in file order (views into staging chunks)
        self._files: list[FileReport] = []
        self._stagings: dict[int, _Staging] = {}  # by id() of the scratch set that groups into it
        self._stagings_lock = threading.Lock()
        self._successor: np.ndarray | None = None  # name predictions learnt from the first block (scan_block)
        self._sessions_first: int | None = None  # first iteration of the files fed so far (as logged)
        self._sessions_last: int | None = None  # last iteration of those files (offsets applied)

    def feed(self, stream: ByteStream, source: str) -> FileReport:
        """Parse one file; raises NoStatsLines when it holds no statistics line at all."""
        report = FileReport(source=source)
        pending: deque[_Pending] = deque()
        with ThreadPoolExecutor(self.workers) as pool:
            for index, block in enumerate(self._blocks(stream)):
                if block is None:  # an over-long line was dropped here
                    pending.append((None, None))
                elif index == 0:  # first block registers the names; later ones only look them up
                    self._absorb(block, self._kernel(block, True), report)
                    self._recycle(block)
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

    def _place_session(self, out: _Scratch, report: FileReport) -> None:
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

    def _blocks(self, stream: ByteStream) -> Iterator[np.ndarray | None]:
        """Blocks of whole lines, read with readinto into uninitialised buffers (no zero-fill, no copies).

        A buffer is reused only after its block was absorbed (`_recycle`), since a worker thread may
        still be scanning it before that. None stands for one line longer than max_line_bytes (dropped).
        """
        carry = b""
        discarding = False
        while True:
            buf = self._buffer(len(carry) + self.block_bytes)
            buf[: len(carry)] = np.frombuffer(carry, dtype=np.uint8)
            got = _read_into(stream, buf.data[len(carry) :])
            if got == 0:
                break
            total = len(carry) + got
            start = 0
            if discarding:
                cut = kernel.find_newline(buf, 0, total)
                if cut < 0:
                    carry = b""
                    continue
                start, discarding = cut + 1, False
            last_nl = kernel.rfind_newline(buf, start, total)
            if last_nl >= 0:
                yield buf[start : last_nl + 1]
                start = last_nl + 1
            carry = buf[start:total].tobytes()
            if len(carry) > self.max_line_bytes:
                yield None
                carry, discarding = b"", True
        if carry:
            yield np.frombuffer(carry, dtype=np.uint8)

    def _buffer(self, size: int) -> np.ndarray:
        """A read buffer: a recycled one (its block was absorbed; kept in the process's free list) or a new one.

        Recycling matters: a fresh buffer page-faults on every 4 KiB it is read into, which cost
        about as much as the read itself on the 6M-line benchmark.
        """
        buf = _READ_BUFFERS.take(size)
        return np.empty(size, dtype=np.uint8) if buf is None else buf[:size]

    def _recycle(self, block: np.ndarray) -> None:
        base = block.base
        if isinstance(base, np.ndarray) and base.base is None:
            _READ_BUFFERS.give(base)

    def _kernel(self, buf: np.ndarray, insert: bool) -> _Scratch:
        """Scan and group one block (in a pool thread except for the first block) into a scratch set.

        The set is sized for the block's usual number of lines; a block of shorter lines continues in a larger
        set (the kernel stops when its arrays are full)."""
        t = self._table
        out = self._take_scratch(_expected_lines(buf.shape[0]))
        out.start(self._successor)
        first_new = int(t.counter[0])
        line, pos = 0, 0
        while True:
            line, pos = kernel.scan_block(
                buf, _LIT_ITER, _LIT_VALUE, *t.arrays, insert, first_new, line, pos, out.status, out.sids,
                out.iters, out.vals, out.starts, out.new_start, out.new_stop, out.successor, out.counts,
            )  # fmt: skip
            if pos >= buf.shape[0]:
                break
            larger = self._take_scratch(out.lines * 2)
            larger.take_over(out, line)
            self._give_back(out)
            out = larger
        out.n, out.first_new = line, first_new
        if insert:  # the first block of a file: later blocks start with its name order as their predictions
            self._successor = out.successor.copy()
        out.group(self._staging_for(out))
        return out

    @staticmethod
    def _take_scratch(lines: int) -> _Scratch:
        return _SCRATCH_SETS.take(lines) or _Scratch(_scratch_lines(lines))

    @staticmethod
    def _give_back(scratch: _Scratch) -> None:
        _SCRATCH_SETS.give(scratch)

    def _staging_for(self, scratch: _Scratch) -> _Staging:
        with self._stagings_lock:
            return self._stagings.setdefault(id(scratch), _Staging())

    def _absorb_pending(self, item: _Pending, report: FileReport) -> None:
        block, future = item
        if block is None or future is None:
            report.lines_read += 1
            self._skip_long_line(report, report.lines_read)
        else:
            self._absorb(block, future.result(), report)
            self._recycle(block)

    def _absorb(self, data: np.ndarray, out: _Scratch, report: FileReport) -> None:
        n, t = out.n, self._table
        status = out.status[:n]
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
        report.lines_read += n
        report.blank_lines += blank
        report.stats_lines += out.grouped[1].shape[0]
        self._place_session(out, report)
        self._grouped.append(out.grouped)
        self._give_back(out)

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
            sid[idx] = self._table.id_of(match["name"].encode("utf-8"))
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

        def copy(first: int, stop: int) -> None:  # every block's part of series [first, stop), in file order
            for block in self._grouped:
                kernel.append_block(*block, cursor, its, vals, first, stop)

        map_series_ranges(offsets, self.workers, copy)  # memory-bound: each thread copies a range of series
        self._grouped = []
        with self._stagings_lock:
            for staging in self._stagings.values():  # read by the join above, by nothing any more
                staging.release()
            self._stagings.clear()
        return _deduplicate(self._table.names, offsets, its, vals, self._files)


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


def map_series_ranges(offsets: np.ndarray, parts: int, work: Callable[[int, int], T]) -> list[T]:
    """work(first, stop) for each of series_ranges(offsets, parts), one thread each when there are several
    (for kernels that release the GIL)."""
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
