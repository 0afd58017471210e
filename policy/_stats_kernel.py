"""Compiled inner loops of the statistics-log parser (numba, nogil): scan lines, hash names, group points.

Belongs here: byte-level loops that would cost seconds per million lines in Python. Everything with
a policy decision in it (what is a line, how duplicates resolve, what gets reported) is spelled out in
`policy/stats_log.py`, which calls these kernels; keep this module free of anything but numba/numpy.

The fast path accepts exactly the nvdlfw_inspect line
``YYYY-MM-DD HH:MM:SS,mmm - LEVEL - <name><ws>iteration=<digits><ws>value=<number>[ws]``.
Any other non-blank line is handed back to Python (status SLOW), which applies the reference regex,
so the kernel never decides that a line is garbage.
"""

from __future__ import annotations

import numba
import numpy as np

STATUS_OK = 0
STATUS_BLANK = 1
STATUS_SLOW = 2  # not on the fast path: Python decides with the reference regex

TABLE_BITS = 16
TABLE_SIZE = 1 << TABLE_BITS  # open-addressing slots; at most half may be used
MAX_NAMES = TABLE_SIZE // 2

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_POW10 = np.array([10.0**k for k in range(23)], dtype=np.float64)
_MAX_EXACT = 1 << 53


@numba.njit(nogil=True, cache=True, inline="always")
def _is_space(c: int) -> bool:
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


@numba.njit(nogil=True, cache=True, inline="always")
def _is_digit(c: int) -> bool:
    return 48 <= c <= 57


@numba.njit(nogil=True, cache=True)
def hash_name(buf: np.ndarray, start: int, stop: int) -> np.uint64:
    """FNV-1a over four interleaved byte lanes (breaks the multiply dependency chain), then mixed."""
    h0 = _FNV_OFFSET
    h1 = _FNV_OFFSET ^ np.uint64(1)
    h2 = _FNV_OFFSET ^ np.uint64(2)
    h3 = _FNV_OFFSET ^ np.uint64(3)
    i = start
    while i + 4 <= stop:
        h0 = (h0 ^ np.uint64(buf[i])) * _FNV_PRIME
        h1 = (h1 ^ np.uint64(buf[i + 1])) * _FNV_PRIME
        h2 = (h2 ^ np.uint64(buf[i + 2])) * _FNV_PRIME
        h3 = (h3 ^ np.uint64(buf[i + 3])) * _FNV_PRIME
        i += 4
    while i < stop:
        h0 = (h0 ^ np.uint64(buf[i])) * _FNV_PRIME
        i += 1
    h = h0 ^ (h1 * np.uint64(3)) ^ (h2 * np.uint64(5)) ^ (h3 * np.uint64(7)) ^ np.uint64(stop - start)
    h ^= h >> np.uint64(29)
    return h * _FNV_PRIME


@numba.njit(nogil=True, cache=True)
def lookup_or_insert(
    keys: np.ndarray, lengths: np.ndarray, ids: np.ndarray, counter: np.ndarray, h: np.uint64, length: int
) -> int:
    """Series id for (hash, name length); a new id when unseen, -1 when the table is full.

    `counter[0]` is the number of ids handed out. A new id is reported to the caller by being
    equal to the previous `counter[0]`.
    """
    mask = np.uint64(TABLE_SIZE - 1)
    slot = h & mask
    while True:
        sid = ids[slot]
        if sid < 0:
            if counter[0] >= MAX_NAMES:
                return -1
            sid = counter[0]
            counter[0] += 1
            keys[slot] = h
            lengths[slot] = length
            ids[slot] = sid
            return sid
        if keys[slot] == h and lengths[slot] == length:
            return sid
        slot = (slot + np.uint64(1)) & mask


@numba.njit(nogil=True, cache=True)
def _parse_number(buf: np.ndarray, i: int, stop: int) -> tuple[float, int, bool]:
    """Parse ``[-+]?(digits[.digits]|nan|inf)`` at i; returns (value, next index, ok)."""
    neg = False
    if i < stop and (buf[i] == 45 or buf[i] == 43):
        neg = buf[i] == 45
        i += 1
    if i + 3 <= stop and buf[i] == 110 and buf[i + 1] == 97 and buf[i + 2] == 110:
        return np.nan, i + 3, True
    if i + 3 <= stop and buf[i] == 105 and buf[i + 1] == 110 and buf[i + 2] == 102:
        return (-np.inf if neg else np.inf), i + 3, True
    mant = 0
    ndigits = 0
    start = i
    while i < stop and _is_digit(buf[i]):
        mant = mant * 10 + (buf[i] - 48)
        ndigits += 1
        i += 1
    if i == start or ndigits > 17:
        return 0.0, i, False
    frac = 0
    if i < stop and buf[i] == 46:
        i += 1
        fstart = i
        while i < stop and _is_digit(buf[i]):
            mant = mant * 10 + (buf[i] - 48)
            ndigits += 1
            i += 1
        frac = i - fstart
        if frac == 0 or ndigits > 17 or frac > 22:
            return 0.0, i, False
    if mant >= _MAX_EXACT:
        return 0.0, i, False
    # Both operands are exact doubles, so one IEEE division is correctly rounded: equals float(text).
    value = mant / _POW10[frac]
    return (-value if neg else value), i, True


@numba.njit(nogil=True, cache=True)
def _match_literal(buf: np.ndarray, i: int, stop: int, lit: np.ndarray) -> bool:
    if i + lit.shape[0] > stop:
        return False
    for k in range(lit.shape[0]):
        if buf[i + k] != lit[k]:
            return False
    return True


@numba.njit(nogil=True, cache=True)
def _header_end(buf: np.ndarray, i: int, stop: int) -> int:
    """Index after ``YYYY-MM-DD HH:MM:SS,mmm - LEVEL - `` or -1."""
    if i + 29 > stop:
        return -1
    for k in range(23):
        c = buf[i + k]
        if k == 4 or k == 7:
            if c != 45:
                return -1
        elif k == 10:
            if c != 32:
                return -1
        elif k == 13 or k == 16:
            if c != 58:
                return -1
        elif k == 19:
            if c != 44:
                return -1
        elif not _is_digit(c):
            return -1
    j = i + 23
    if buf[j] != 32 or buf[j + 1] != 45 or buf[j + 2] != 32:
        return -1
    j += 3
    lstart = j
    while j < stop and 65 <= buf[j] <= 90:
        j += 1
    if j == lstart or j + 3 > stop or buf[j] != 32 or buf[j + 1] != 45 or buf[j + 2] != 32:
        return -1
    return j + 3


@numba.njit(nogil=True, cache=True)
def _parse_line(buf, i, n, lit_iter, lit_value, out_line):
    """Fast-path parse of the line starting at i.

    On success fills out_line = [name_start, name_stop, iteration, next_line_start] and returns
    (value, True). The line must end with optional whitespace and a newline (or the buffer end).
    """
    j = _header_end(buf, i, n)
    if j < 0:
        return 0.0, False
    name_start = j
    while j < n and 33 <= buf[j] <= 126:
        j += 1
    name_stop = j
    if name_stop == name_start or j >= n or not _is_space(buf[j]):
        return 0.0, False
    while j < n and _is_space(buf[j]):
        j += 1
    if not _match_literal(buf, j, n, lit_iter):
        return 0.0, False
    j += lit_iter.shape[0]
    it = 0
    dstart = j
    while j < n and _is_digit(buf[j]) and j - dstart < 18:
        it = it * 10 + (buf[j] - 48)
        j += 1
    if j == dstart or j >= n or not _is_space(buf[j]):
        return 0.0, False
    while j < n and _is_space(buf[j]):
        j += 1
    if not _match_literal(buf, j, n, lit_value):
        return 0.0, False
    value, j, ok = _parse_number(buf, j + lit_value.shape[0], n)
    if not ok:
        return 0.0, False
    while j < n and _is_space(buf[j]):
        j += 1
    if j < n and buf[j] != 10:
        return 0.0, False
    out_line[0] = name_start
    out_line[1] = name_stop
    out_line[2] = it
    out_line[3] = j + 1
    return value, True


@numba.njit(nogil=True, cache=True)
def count_lines(buf: np.ndarray) -> int:
    """Number of lines in buf (a last line without newline counts)."""
    count = 0
    for k in range(buf.shape[0]):
        count += buf[k] == 10
    if buf.shape[0] > 0 and buf[buf.shape[0] - 1] != 10:
        count += 1
    return count


@numba.njit(nogil=True, cache=True)
def _lookup(keys, lengths, ids, h, length) -> int:
    """Read-only probe: the series id, or -1 when the name is not in the table."""
    mask = np.uint64(TABLE_SIZE - 1)
    slot = h & mask
    while True:
        sid = ids[slot]
        if sid < 0:
            return -1
        if keys[slot] == h and lengths[slot] == length:
            return sid
        slot = (slot + np.uint64(1)) & mask


@numba.njit(nogil=True, cache=True)
def scan_block(buf, lit_iter, lit_value, keys, lengths, ids, counter, insert):
    """Scan every line of `buf` (whole lines; the last may lack its newline).

    Returns per-line arrays (status, series id, iteration, value, line start) and, for names first
    seen here, their (start, stop) offsets indexed by id. With insert=False the name table is only
    read, so several blocks can be scanned in parallel threads; an unknown name then takes the
    slow path, where Python inserts it.
    """
    n = buf.shape[0]
    cap = count_lines(buf)
    status = np.empty(cap, dtype=np.int8)
    sids = np.empty(cap, dtype=np.int32)
    iters = np.empty(cap, dtype=np.int64)
    vals = np.empty(cap, dtype=np.float64)
    starts = np.empty(cap + 1, dtype=np.int64)
    new_start = np.zeros(MAX_NAMES, dtype=np.int64)
    new_stop = np.zeros(MAX_NAMES, dtype=np.int64)
    first_new = counter[0]
    scratch = np.zeros(4, dtype=np.int64)
    line = 0
    pos = 0
    while pos < n:
        starts[line] = pos
        value, ok = _parse_line(buf, pos, n, lit_iter, lit_value, scratch)
        sid = -1
        if ok:
            h = hash_name(buf, scratch[0], scratch[1])
            length = scratch[1] - scratch[0]
            if insert:
                sid = lookup_or_insert(keys, lengths, ids, counter, h, length)
                if sid >= first_new and new_stop[sid] == 0:
                    new_start[sid] = scratch[0]
                    new_stop[sid] = scratch[1]
            else:
                sid = _lookup(keys, lengths, ids, h, length)
        if sid >= 0:
            status[line] = STATUS_OK
            sids[line] = sid
            iters[line] = scratch[2]
            vals[line] = value
            pos = scratch[3]
        else:
            end = pos
            blank = True
            while end < n and buf[end] != 10:
                if blank and not _is_space(buf[end]):
                    blank = False
                end += 1
            status[line] = STATUS_BLANK if blank else STATUS_SLOW
            pos = end + 1
        line += 1
    starts[line] = n + 1 if n > 0 and buf[n - 1] != 10 else n
    return line, first_new, status, sids, iters, vals, starts, new_start, new_stop


@numba.njit(nogil=True, cache=True)
def group_points(sid, iters, vals, n_series):
    """Counting sort of points by series id, keeping file order inside each series.

    Returns (offsets[n_series+1], iterations, values) so series s is [offsets[s]:offsets[s+1]].
    """
    counts = np.zeros(n_series + 1, dtype=np.int64)
    for k in range(sid.shape[0]):
        counts[sid[k] + 1] += 1
    offsets = np.cumsum(counts)
    cursor = offsets[:-1].copy()
    out_it = np.empty(sid.shape[0], dtype=np.int64)
    out_val = np.empty(sid.shape[0], dtype=np.float64)
    for k in range(sid.shape[0]):
        s = sid[k]
        p = cursor[s]
        out_it[p] = iters[k]
        out_val[p] = vals[k]
        cursor[s] = p + 1
    return offsets, out_it, out_val


@numba.njit(nogil=True, cache=True)
def is_strictly_increasing(a: np.ndarray) -> bool:
    for k in range(1, a.shape[0]):
        if a[k] <= a[k - 1]:
            return False
    return True
