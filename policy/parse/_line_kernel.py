"""Compiled parsers of ONE statistics line (numba, inlined into `scan_block` of policy/parse/_stats_kernel.py).

Belongs here: byte-level reads of a single line as nvdlfw_inspect writes it, each `inline="always"`: the header
(`_header_end`: ``YYYY-MM-DD HH:MM:SS,mmm - LEVEL - ``, the timestamp checked 8 bytes at a time), the tail read
forwards after a predicted name (`_tail_fast`), the exact nvdlfw form read backwards from the line's end
(`_parse_exact`), the general fast-path form (`_parse_line`, `_parse_number`), and where a line ends or whether it
is blank. Walking a block line by line, name ids and line statuses stay in policy/parse/_stats_kernel.py; what a line
means when none of these accepts it is policy/parse/stats_log.py's (the reference regex).

Each parser either returns exactly what the reference regex gives the line, or says no (the caller then tries
the next one, and finally hands the line to Python). Keep this module free of anything but numba/numpy.

Numba keys a cached kernel on its own source file only: `scan_block`'s cache entry does not notice an edit here
(the functions here are inlined into it, never compiled on their own). After changing this file, change or touch
policy/parse/_stats_kernel.py too, as for policy/parse/_name_kernel.py (tests/policy/parse/test_kernels.py compares the compiled
kernels with their interpreted twins, which always run the current source).
"""

from __future__ import annotations

import numba
import numpy as np

from fp8_policy.policy.parse._name_kernel import load_u64

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
