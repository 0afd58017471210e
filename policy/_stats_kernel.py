"""Compiled inner loops of the statistics-log parser (numba, nogil): scan lines, group points.

Belongs here: byte-level loops that would cost seconds per million lines in Python. Everything with
a policy decision in it (what is a line, how duplicates resolve, what gets reported) is spelled out in
`policy/stats_log.py`, which calls these kernels; keep this module free of anything but numba/numpy.

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

from fp8_policy.policy._name_kernel import hash_name, load_u64, lookup, lookup_or_insert, same_name

STATUS_OK = 0
STATUS_BLANK = 1
STATUS_SLOW = 2  # not on the fast path: Python decides with the reference regex

_POW10 = np.array([10.0**k for k in range(23)], dtype=np.float64)
_MAX_EXACT = 1 << 53


@numba.njit(nogil=True, cache=True, inline="always")
def _is_space(c: int) -> bool:
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


@numba.njit(nogil=True, cache=True, inline="always")
def _is_digit(c: int) -> bool:
    return 48 <= c <= 57


@numba.njit(nogil=True, cache=True, inline="always")
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


@numba.njit(nogil=True, cache=True, inline="always")
def _match_literal(buf: np.ndarray, i: int, stop: int, lit: np.ndarray) -> bool:
    if i + lit.shape[0] > stop:
        return False
    for k in range(lit.shape[0]):
        if buf[i + k] != lit[k]:
            return False
    return True


def _header_words(pattern: bytes) -> tuple[np.uint64, np.uint64, np.uint64, np.uint64]:
    """SWAR constants for one 8-byte piece of the timestamp ('D' = any digit): (template, must-be-zero mask,
    digit add, digit carry). A piece x matches when y = x ^ template has no bit of the mask set (literal bytes
    equal, digit bytes 0x30..0x3F) and y + add carries into no digit byte's 0x10 bit (0x30..0x39)."""
    template = mask = add = carry = 0
    for k, char in enumerate(pattern):
        if char == ord("D"):
            template |= 0x30 << 8 * k
            mask |= 0xF0 << 8 * k
            add |= 0x06 << 8 * k
            carry |= 0x10 << 8 * k
        else:
            template |= char << 8 * k
            mask |= 0xFF << 8 * k
    return np.uint64(template), np.uint64(mask), np.uint64(add), np.uint64(carry)


def _word(text: bytes) -> np.uint64:
    return np.frombuffer(text.ljust(8, b"\0"), dtype="<u8")[0]


_TS0 = _header_words(b"DDDD-DD-")  # "YYYY-MM-DD HH:MM:SS,mmm " in three pieces
_TS1 = _header_words(b"DD DD:DD")
_TS2 = _header_words(b":DD,DDD ")
_SEP_IT, _ERATION = _word(b" \t\t\t\t it"), _word(b"eration=")  # nvdlfw's " \t\t\t\t " then the keys
_SEP_VA, _LUE = _word(b" \t\t\t\t va"), _word(b"lue=")
_LOW4 = np.uint64(0xFFFFFFFF)
_FAST_TAIL_BYTES = 80  # the most the fast tail reads past the name, with room to spare


@numba.njit(nogil=True, cache=True, inline="always")
def _timestamp_piece(buf, i: int, piece) -> bool:
    template, mask, add, carry = piece
    y = load_u64(buf, i) ^ template
    return (y & mask) == 0 and ((y + add) & carry) == 0


@numba.njit(nogil=True, cache=True, inline="always")
def _header_end(buf: np.ndarray, i: int, stop: int) -> int:
    """Index after ``YYYY-MM-DD HH:MM:SS,mmm - LEVEL - `` at i (the timestamp checked 8 bytes at a time), or -1.
    Nothing at or past `stop` is read: the line's end, or a bound the caller knows lies within buf."""
    if i + 29 > stop:
        return -1
    if not (_timestamp_piece(buf, i, _TS0) and _timestamp_piece(buf, i + 8, _TS1)):
        return -1
    if not _timestamp_piece(buf, i + 16, _TS2) or buf[i + 24] != 45 or buf[i + 25] != 32:
        return -1
    j = i + 26
    while j < stop and 65 <= buf[j] <= 90:
        j += 1
    if j == i + 26 or j + 3 > stop or buf[j] != 32 or buf[j + 1] != 45 or buf[j + 2] != 32:
        return -1
    return j + 3


@numba.njit(nogil=True, cache=True, inline="always")
def _parse_line(buf, s, e, lit_iter, lit_value, out_line):
    """Fast-path parse of the line buf[s:e] (newline excluded), tail first.

    The tail `iteration=<digits><ws>value=<number>[ws]` is read backwards from the end, so the
    name is never scanned byte by byte (only hashed). On success fills out_line = [name_start,
    name_stop, iteration] and returns (value, True).
    """
    while e > s and _is_space(buf[e - 1]):
        e -= 1
    v = e
    while v > s and not _is_space(buf[v - 1]):
        v -= 1
    if not _match_literal(buf, v, e, lit_value):
        return 0.0, False
    value, stop, ok = _parse_number(buf, v + lit_value.shape[0], e)
    if not ok or stop != e:
        return 0.0, False
    w = v
    while w > s and _is_space(buf[w - 1]):
        w -= 1
    t = w
    while t > s and _is_digit(buf[t - 1]):
        t -= 1
    if w == v or t == w or w - t > 18:
        return 0.0, False
    t -= lit_iter.shape[0]
    if t < s or not _match_literal(buf, t, w, lit_iter):
        return 0.0, False
    it = 0
    for k in range(t + lit_iter.shape[0], w):
        it = it * 10 + (buf[k] - 48)
    name_stop = t
    while name_stop > s and _is_space(buf[name_stop - 1]):
        name_stop -= 1
    name_start = _header_end(buf, s, name_stop)
    if name_stop == t or name_start < 0 or name_start >= name_stop:
        return 0.0, False
    out_line[0] = name_start
    out_line[1] = name_stop
    out_line[2] = it
    return value, True


@numba.njit(nogil=True, cache=True, inline="always")
def _is_sep(buf, p: int) -> bool:
    """nvdlfw's exact separator " \t\t\t\t " at buf[p:p+6]."""
    return (
        buf[p] == 32
        and buf[p + 1] == 9
        and buf[p + 2] == 9
        and buf[p + 3] == 9
        and buf[p + 4] == 9
        and buf[p + 5] == 32
    )


@numba.njit(nogil=True, cache=True, inline="always")
def _parse_exact(buf, s, e, out_line):
    """The line exactly as nvdlfw_inspect writes it (finite value with 4 decimals), else (0.0, False).

    Straight-line checks at fixed offsets from the end; anything unusual (nan/inf, other spacing,
    more decimals) returns False and the general `_parse_line` decides.
    """
    if e > s and buf[e - 1] == 13:
        e -= 1
    if e - s < 60 or buf[e - 5] != 46:
        return 0.0, False
    frac = 0
    for k in range(e - 4, e):
        c = buf[k]
        if not _is_digit(c):
            return 0.0, False
        frac = frac * 10 + (c - 48)
    p = e - 5
    whole = 0
    scale = 1
    while _is_digit(buf[p - 1]) and e - p < 20:
        p -= 1
        whole += (buf[p] - 48) * scale
        scale *= 10
    if p == e - 5 or e - p >= 20:
        return 0.0, False
    neg = buf[p - 1] == 45
    if neg:
        p -= 1
    p -= 6  # "value="
    if not (
        buf[p] == 118
        and buf[p + 1] == 97
        and buf[p + 2] == 108
        and buf[p + 3] == 117
        and buf[p + 4] == 101
        and buf[p + 5] == 61
    ):
        return 0.0, False
    p -= 6
    if not _is_sep(buf, p):
        return 0.0, False
    q = p
    it = 0
    scale = 1
    while _is_digit(buf[q - 1]) and p - q < 18 and q - 1 > s:
        q -= 1
        it += (buf[q] - 48) * scale
        scale *= 10
    if q == p or p - q >= 18:
        return 0.0, False
    q -= 10  # "iteration="
    if q - 6 <= s or not (
        buf[q] == 105
        and buf[q + 1] == 116
        and buf[q + 2] == 101
        and buf[q + 3] == 114
        and buf[q + 8] == 110
        and buf[q + 9] == 61
        and buf[q + 4] == 97
        and buf[q + 5] == 116
        and buf[q + 6] == 105
        and buf[q + 7] == 111
    ):
        return 0.0, False
    q -= 6
    if not _is_sep(buf, q):
        return 0.0, False
    name_stop = q
    while name_stop > s and _is_space(buf[name_stop - 1]):  # as in _parse_line: the name never ends in blanks
        name_stop -= 1
    name_start = _header_end(buf, s, name_stop)
    if name_start < 0 or name_start >= name_stop:
        return 0.0, False
    mant = whole * 10000 + frac
    if mant >= _MAX_EXACT:
        return 0.0, False
    value = mant / 10000.0  # exact operands: correctly rounded, equals float(text)
    out_line[0] = name_start
    out_line[1] = name_stop
    out_line[2] = it
    return (-value if neg else value), True


@numba.njit(nogil=True, cache=True, inline="always")
def _tail_fast(buf, q: int, out_line) -> tuple[float, int]:
    """What follows a predicted name at q, read forwards, exactly as nvdlfw_inspect writes it:
    `` \t\t\t\t iteration=<digits> \t\t\t\t value=[-]<digits>.<4 digits>`` then LF or CRLF.

    Returns (value, index of the line's newline) and sets out_line[2] to the iteration, or (0.0, -1) for
    anything else (the general path decides). The caller keeps q + _FAST_TAIL_BYTES within buf."""
    if load_u64(buf, q) != _SEP_IT or load_u64(buf, q + 8) != _ERATION:
        return 0.0, -1
    r = q + 16
    first = r
    it = 0
    while r - first < 19 and _is_digit(buf[r]):
        it = it * 10 + (buf[r] - 48)
        r += 1
    if r == first or r - first > 18:
        return 0.0, -1
    if load_u64(buf, r) != _SEP_VA or (load_u64(buf, r + 8) & _LOW4) != _LUE:
        return 0.0, -1
    r += 12
    neg = buf[r] == 45
    if neg:
        r += 1
    first = r
    whole = 0
    while r - first < 15 and _is_digit(buf[r]):
        whole = whole * 10 + (buf[r] - 48)
        r += 1
    if r == first or r - first >= 15 or buf[r] != 46:
        return 0.0, -1
    frac = 0
    for k in range(r + 1, r + 5):
        c = buf[k]
        if not _is_digit(c):
            return 0.0, -1
        frac = frac * 10 + (c - 48)
    r += 5
    if buf[r] == 13:
        r += 1
    if buf[r] != 10:
        return 0.0, -1
    mant = whole * 10000 + frac
    if mant >= _MAX_EXACT:
        return 0.0, -1
    value = mant / 10000.0  # exact operands: correctly rounded, equals float(text)
    out_line[2] = it
    return (-value if neg else value), r


@numba.njit(nogil=True, cache=True, inline="always")
def _line_end(buf, start: int, stop: int) -> int:
    """Index of the first newline in buf[start:stop], or stop (a last line without one)."""
    for k in range(start, stop):
        if buf[k] == 10:
            return k
    return stop


@numba.njit(nogil=True, cache=True, inline="always")
def _is_blank(buf, s, e) -> bool:
    for k in range(s, e):
        if not _is_space(buf[k]):
            return False
    return True


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
