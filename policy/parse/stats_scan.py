"""Scanning one block of whole lines with the compiled kernels: the parser's per-block work and its buffers.

Belongs here: calling policy/parse/_stats_kernel.py on a block (`scan`: status, series id, iteration and value per
line, resumed in a larger scratch set when the block holds more lines than expected), grouping a scanned block
by series into staging (`Scratch.group`), and the scratch sets and staging chunks kept between parses
(policy/parse/buffer_pool.py, `prefault_buffers`). Runs in the parser's pool threads. What happens to a block's
results (slow-path lines, sessions, the join in file order) is policy/parse/stats_log.py's; reading the blocks is
policy/parse/stats_blocks.py's.
"""

from __future__ import annotations

import numpy as np

from fp8_policy.policy.parse import kernels
from fp8_policy.policy.parse.buffer_pool import FreeList
from fp8_policy.policy.parse.name_table import MAX_NAMES, NameTable
from fp8_policy.policy.parse.stats_blocks import _READ_BUFFERS, DEFAULT_BLOCK_BYTES, DEFAULT_MAX_LINE_BYTES

kernel = kernels.stats  # compiled once loaded in this process, interpreted before (policy/parse/kernels.py)

_LIT_ITER = np.frombuffer(b"iteration=", dtype=np.uint8)
_LIT_VALUE = np.frombuffer(b"value=", dtype=np.uint8)
# A block's points grouped by series id: offsets, iterations, values (see kernel.group_block)
Grouped = tuple[np.ndarray, np.ndarray, np.ndarray]
_STAGING_POINTS = 1024 * 1024  # points per staging chunk (8 MiB of iterations, 8 MiB of values)
_EXPECTED_LINE_BYTES = 80  # scratch sets are sized for blocks of lines this long on average (real ones: ~140)


class Staging:
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


class Scratch:
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
        self.grouped: Grouped = (np.zeros(1, dtype=np.int64), np.empty(0, np.int64), np.empty(0, np.float64))

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

    def take_over(self, smaller: Scratch, lines: int) -> None:
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

    def group(self, staging: Staging) -> None:
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


# Buffers kept between parses in this process (policy/parse/buffer_pool.py); a parse with `workers` scan threads has
# about `workers + 2` scratch sets in flight (and as many read buffers, policy/parse/stats_blocks.py), and staging for
# all its points until `finish`.
_SCRATCH_SETS: FreeList[Scratch] = FreeList(6, lambda scratch: scratch.lines)
_STAGING_CHUNKS: FreeList[tuple[np.ndarray, np.ndarray]] = FreeList(12, lambda chunk: int(chunk[0].shape[0]))


def take_scratch(lines: int) -> Scratch:
    return _SCRATCH_SETS.take(lines) or Scratch(_scratch_lines(lines))


def give_back(scratch: Scratch) -> None:
    _SCRATCH_SETS.give(scratch)


def scan(buf: np.ndarray, table: NameTable, insert: bool, successor: np.ndarray | None) -> Scratch:
    """Scan one block into a scratch set (kernel.scan_block); with insert=True new names go into `table`.

    The set is sized for the block's usual number of lines; a block of shorter lines continues in a larger
    set (the kernel stops when its arrays are full)."""
    if not buf.flags.writeable:  # e.g. a last line without a newline, from bytes (stats_blocks.read_blocks)
        buf = buf.copy()  # numba compiles another scan_block for a read-only array: tens of seconds mid-ingest
    out = take_scratch(_expected_lines(buf.shape[0]))
    out.start(successor)
    first_new = int(table.counter[0])
    line, pos = 0, 0
    while True:
        line, pos = kernel.scan_block(
            buf, _LIT_ITER, _LIT_VALUE, *table.arrays, insert, first_new, line, pos, out.status, out.sids,
            out.iters, out.vals, out.starts, out.new_start, out.new_stop, out.successor, out.counts,
        )  # fmt: skip
        if pos >= buf.shape[0]:
            break
        larger = take_scratch(out.lines * 2)
        larger.take_over(out, line)
        give_back(out)
        out = larger
    out.n, out.first_new = line, first_new
    return out


def prefault_buffers(workers: int = 2, staging_points: int = 8 * _STAGING_POINTS) -> None:
    """Put one parse's buffers (`workers` scan threads, `staging_points` points staged) in the free lists, every
    page touched: for a serving process's start-up, so its first ingest does not page-fault them in (see
    policy/parse/buffer_pool.py). About 250 MB resident with the defaults."""
    for _ in range(workers + 2):
        buf = np.empty(DEFAULT_BLOCK_BYTES + DEFAULT_MAX_LINE_BYTES, dtype=np.uint8)
        buf.fill(0)
        _READ_BUFFERS.give(buf)
        scratch = Scratch(_scratch_lines(_expected_lines(DEFAULT_BLOCK_BYTES)))
        scratch.touch()
        _SCRATCH_SETS.give(scratch)
    for _ in range(max(1, staging_points // _STAGING_POINTS)):
        its, vals = np.empty(_STAGING_POINTS, np.int64), np.empty(_STAGING_POINTS, np.float64)
        its.fill(0)  # np.zeros would leave the pages untouched (calloc)
        vals.fill(0)
        _STAGING_CHUNKS.give((its, vals))
