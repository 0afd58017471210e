"""Compiled inner loops of the statistics-log parser (numba, nogil): scan lines, group points.

Belongs here: byte-level loops over a block that would cost seconds per million lines in Python (walking the
lines, name ids, line statuses, grouping and joining points per series). Everything with a policy decision in it
(what is a line, how duplicates resolve, what gets reported) is spelled out in `policy/parse/stats_log.py`, which calls
these kernels (through policy/parse/stats_scan.py and policy/parse/stats_blocks.py); the parsers of one line are in
`policy/parse/_line_kernel.py`, inlined here. Keep this module free of anything but numba/numpy.

The fast path accepts exactly the nvdlfw_inspect line
``YYYY-MM-DD HH:MM:SS,mmm - LEVEL - <name><ws>iteration=<digits><ws>value=<number>[ws]``, in two ways:
a line whose name is the one predicted from the log's name cycle is read forwards once (_header_end,
same_name, _tail_fast); any other line has its end found and its tail parsed backwards (_parse_exact,
_parse_line). Any other non-blank line is handed back to Python (status SLOW), which applies the
reference regex, so the kernel never decides that a line is garbage.
"""

from __future__ import annotations

import numba
import numpy as np

from fp8_policy.policy.parse._line_kernel import (
    _FAST_TAIL_BYTES,
    _header_end,
    _is_blank,
    _line_end,
    _parse_exact,
    _parse_line,
    _tail_fast,
)
from fp8_policy.policy.parse._name_kernel import hash_name, lookup, lookup_or_insert, same_name

STATUS_OK = 0
STATUS_BLANK = 1
STATUS_SLOW = 2  # not on the fast path: Python decides with the reference regex


@numba.njit(nogil=True, cache=True)
def scan_block(
    buf,
    lit_iter,
    lit_value,
    keys,
    lengths,
    ids,
    counter,
    arena,
    arena_off,
    sid_len,
    insert,
    first_new,
    line,
    pos,
    status,
    sids,
    iters,
    vals,
    starts,
    new_start,
    new_stop,
    successor,
    counts,
):
    """Scan the lines of `buf` (whole lines; the last may lack its newline) from byte `pos`, line number `line`,
    until the end of buf or until the output arrays are full; returns (lines scanned in all, next byte).

    Per line: status, series id, iteration, value (`status`, `sids`, `iters`, `vals` of one capacity,
    `starts` one longer) and its start; for names inserted here (ids >= first_new), their (start, stop)
    offsets in new_start/new_stop, indexed by id; counts[0] += blank lines, counts[1] += slow-path lines,
    counts[2] = max(counts[2], longest line without its newline). `successor[id]` is the id that followed `id` last time:
    nvdlfw_inspect writes the same names in the same cycle every logged iteration, so the predicted name is
    compared in place (same_name) and the rest of the line read forwards once (_tail_fast): no newline
    search, no hash. A line the prediction does not fit takes the general path: its end found, the tail
    parsed backwards (_parse_exact, then _parse_line), the name hashed and looked up. Either way a line gets
    exactly the name, iteration and value the reference regex gives it: after a name ending in a non-blank
    only one split of the line can match the regex's tail through its end of line.

    With insert=False the name table is only read, so several blocks can be scanned in parallel threads;
    an unknown name then takes the slow path, where Python inserts it. The arrays are the caller's, reused
    from block to block (fresh memory page-faults on first touch).
    """
    n = buf.shape[0]
    capacity = status.shape[0]
    scratch = np.zeros(3, dtype=np.int64)
    previous = -1
    while pos < n and line < capacity:
        starts[line] = pos
        sid = -1
        end = -1
        value = 0.0
        guess = successor[previous] if previous >= 0 else -1
        if guess >= 0 and pos + 48 + sid_len[guess] + _FAST_TAIL_BYTES <= n:
            name_start = _header_end(buf, pos, pos + 45)  # a level of up to 16 letters; longer: general path
            if name_start >= 0 and same_name(arena, arena_off, sid_len, guess, buf, name_start, sid_len[guess]):
                value, end = _tail_fast(buf, name_start + sid_len[guess], scratch)
                if end >= 0:
                    sid = guess
        if sid < 0:
            end = _line_end(buf, pos, n)
            value, ok = _parse_exact(buf, pos, end, scratch)
            if not ok:
                value, ok = _parse_line(buf, pos, end, lit_iter, lit_value, scratch)
            if ok:
                length = scratch[1] - scratch[0]
                h = hash_name(buf, scratch[0], scratch[1])
                if insert:
                    sid = lookup_or_insert(
                        keys, lengths, ids, counter, arena, arena_off, sid_len, h, buf, scratch[0], length
                    )
                    if sid >= first_new and new_stop[sid] == 0:
                        new_start[sid] = scratch[0]
                        new_stop[sid] = scratch[1]
                else:
                    sid = lookup(keys, lengths, ids, h, length)
                if previous >= 0 and sid >= 0:
                    successor[previous] = sid
        previous = sid
        if sid >= 0:
            status[line] = STATUS_OK
            sids[line] = sid
            iters[line] = scratch[2]
            vals[line] = value
        elif _is_blank(buf, pos, end):
            status[line] = STATUS_BLANK
            counts[0] += 1
        else:
            status[line] = STATUS_SLOW
            counts[1] += 1
        if end - pos > counts[2]:
            counts[2] = end - pos
        pos = end + 1
        line += 1
    starts[line] = pos
    return line, pos


@numba.njit(nogil=True, cache=True)
def find_newline(buf: np.ndarray, start: int, stop: int) -> int:
    """Index of the first newline in buf[start:stop], or -1."""
    for k in range(start, stop):
        if buf[k] == 10:
            return k
    return -1


@numba.njit(nogil=True, cache=True)
def rfind_newline(buf: np.ndarray, start: int, stop: int) -> int:
    """Index of the last newline in buf[start:stop], or -1."""
    for k in range(stop - 1, start - 1, -1):
        if buf[k] == 10:
            return k
    return -1


@numba.njit(nogil=True, cache=True)
def group_block(status, sids, iters, vals, n, out_it, out_val):
    """The OK lines of one scanned block grouped by series id into out_it/out_val (at least n long), file
    order kept inside each series.

    Returns (offsets[n_ids+1], points): series s of this block is out_*[offsets[s]:offsets[s+1]], n_ids
    being one more than the largest id in the block. Runs in the scanning thread, so the grouping of a
    whole file is spread over the scan threads instead of one pass over all points at the end.
    """
    n_ids = 0
    n_ok = 0
    for k in range(n):
        if status[k] == STATUS_OK:
            n_ok += 1
            if sids[k] >= n_ids:
                n_ids = sids[k] + 1
    counts = np.zeros(n_ids + 1, dtype=np.int64)
    for k in range(n):
        if status[k] == STATUS_OK:
            counts[sids[k] + 1] += 1
    offsets = np.cumsum(counts)
    cursor = offsets[:-1].copy()
    for k in range(n):
        if status[k] == STATUS_OK:
            s = sids[k]
            p = cursor[s]
            out_it[p] = iters[k]
            out_val[p] = vals[k]
            cursor[s] = p + 1
    return offsets, n_ok


@numba.njit(nogil=True, cache=True)
def append_block(block_offsets, block_its, block_vals, cursor, out_it, out_val, first, stop):
    """Copy series [first, stop) of one grouped block (group_block) behind what earlier blocks put in each
    series; advances cursor. Disjoint series ranges can be copied by different threads at once."""
    for s in range(first, min(stop, block_offsets.shape[0] - 1)):
        lo = block_offsets[s]
        hi = block_offsets[s + 1]
        p = cursor[s]
        for k in range(lo, hi):
            out_it[p] = block_its[k]
            out_val[p] = block_vals[k]
            p += 1
        cursor[s] = p


@numba.njit(nogil=True, cache=True)
def strictly_increasing_series(offsets, its):
    """Per series [offsets[s]:offsets[s+1]] of `its`: whether its iterations are strictly increasing."""
    n_series = offsets.shape[0] - 1
    out = np.ones(n_series, dtype=np.bool_)
    for s in range(n_series):
        for k in range(offsets[s] + 1, offsets[s + 1]):
            if its[k] <= its[k - 1]:
                out[s] = False
                break
    return out
