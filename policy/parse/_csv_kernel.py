"""Compiled CSV row writer for the metrics export (numba, nogil): `prefix,iteration,value\\n` per point.

Belongs here: the byte loop that turns one series' arrays into CSV text, millions of rows a second. What a
row means (columns, quoting of names, the layout) is decided in `policy/csv_export.py`; keep this module free
of anything but numba/numpy.

Values are written exactly as Python's ``f"{v:.4f}"`` writes them (the log's own 4 decimals; `nan`, `inf`,
`-inf`, `-0.0000` for negative zero). The digits come from ``k = round(|v| * 10**4)``; that equals Python's
correctly rounded result unless ``|v| * 10**4`` lies near a half (where the product's rounding could pick the
other neighbour) or is too large to hold exactly: the kernel then reports the row back (returns its index) and
the caller formats that series in Python, so the output never differs from ``format(v, ".4f")``.
"""

from __future__ import annotations

import numba
import numpy as np

_SCALE = 10_000.0
_MAX_EXACT = float(1 << 52)  # |v| * 10**4 below this: the product's integer part is exact
_TIE_MARGIN = 1e-6  # fractional parts within this of 0.5 go to Python


@numba.njit(nogil=True, cache=True, inline="always")
def _write_uint(out: np.ndarray, pos: int, value: int) -> int:
    """Decimal digits of a non-negative integer at out[pos:]; returns the new position."""
    if value == 0:
        out[pos] = 48
        return pos + 1
    digits = np.empty(20, dtype=np.uint8)
    n = 0
    while value > 0:
        digits[n] = 48 + value % 10
        value //= 10
        n += 1
    for k in range(n):
        out[pos + k] = digits[n - 1 - k]
    return pos + n


@numba.njit(nogil=True, cache=True)
def write_rows(
    prefix: np.ndarray, iterations: np.ndarray, values: np.ndarray, start: int, stop: int, out: np.ndarray
) -> tuple[int, int]:
    """Rows start..stop-1 into `out` (sized ≥ (stop-start)·(len(prefix)+ROW_SLACK), csv_export.py).

    Returns (bytes written, -1), or (0, row) for the first row the kernel cannot format exactly.
    """
    pos = 0
    plen = prefix.shape[0]
    for r in range(start, stop):
        for k in range(plen):
            out[pos + k] = prefix[k]
        pos += plen
        it = iterations[r]
        if it < 0:
            out[pos] = 45
            pos += 1
            it = -it
        pos = _write_uint(out, pos, it)
        out[pos] = 44
        pos += 1
        v = values[r]
        if np.isnan(v):
            out[pos] = 110
            out[pos + 1] = 97
            out[pos + 2] = 110
            pos += 3
        elif np.isinf(v):
            if v < 0:
                out[pos] = 45
                pos += 1
            out[pos] = 105
            out[pos + 1] = 110
            out[pos + 2] = 102
            pos += 3
        else:
            x = abs(v) * _SCALE
            if x >= _MAX_EXACT:
                return 0, r
            whole = np.floor(x)
            frac = x - whole
            if abs(frac - 0.5) < _TIE_MARGIN:
                return 0, r
            k = int(whole) + (1 if frac > 0.5 else 0)
            if np.signbit(v):
                out[pos] = 45
                pos += 1
            pos = _write_uint(out, pos, k // 10_000)
            out[pos] = 46
            pos += 1
            rest = k % 10_000
            out[pos] = 48 + rest // 1000
            out[pos + 1] = 48 + (rest // 100) % 10
            out[pos + 2] = 48 + (rest // 10) % 10
            out[pos + 3] = 48 + rest % 10
            pos += 4
        out[pos] = 10
        pos += 1
    return pos, -1
