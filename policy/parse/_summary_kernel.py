"""Compiled per-series summaries (numba, nogil): counts of non-finite points, min, max, mean and p95 over the
finite points of every series of a rank in one call.

Belongs here: the arithmetic of `policy.parse.assemble.summarize`, which stores these numbers with every series.
They equal what NumPy computes per series, bit for bit (tests/policy/parse/test_summary_kernel.py):
* the mean is NumPy's `add.reduce` (pairwise summation, numpy/_core/src/umath/loops_utils.h.src,
  `pairwise_sum`: fewer than 8 terms in order, up to 128 with 8 accumulators, larger halves recursively,
  the cut a multiple of 8) added to the identity 0.0, divided by the count;
* p95 is `numpy.percentile(..., 95)` with its default "linear" method (numpy/lib/_function_base_impl.py:
  virtual index `(n - 1) * q`, the neighbours below and above it, and `_lerp`, which interpolates from
  the upper neighbour when the weight is 0.5 or more).
"""

from __future__ import annotations

import math

import numba
import numpy as np

_Q95 = 95 / 100  # numpy.percentile divides q by 100 the same way


@numba.njit(nogil=True, cache=True)
def _block_sum(a: np.ndarray, lo: int, n: int) -> float:
    """NumPy's pairwise_sum for n <= 128: in order below 8 terms, else 8 accumulators."""
    if n < 8:
        res = -0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    whole = n - n % 8
    while i < whole:
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@numba.njit(nogil=True, cache=True)
def _pairwise_sum(a: np.ndarray, lo: int, n: int) -> float:
    """NumPy's pairwise_sum: above 128 terms, (first half) + (second half), the cut a multiple of 8.

    Written with an explicit stack: numba's on-disk cache of a self-recursive function crashed the
    process that loaded it (numba 0.68.1)."""
    los = np.empty(64, dtype=np.int64)
    ns = np.empty(64, dtype=np.int64)
    stage = np.zeros(64, dtype=np.int64)
    left = np.empty(64, dtype=np.float64)
    sp = 0
    los[0], ns[0] = lo, n
    ret = 0.0
    while sp >= 0:
        m = ns[sp]
        if m <= 128:
            ret = _block_sum(a, los[sp], m)
            sp -= 1
            continue
        half = m // 2
        half -= half % 8
        if stage[sp] == 0:  # descend into the first half
            stage[sp] = 1
            sp += 1
            los[sp], ns[sp], stage[sp] = los[sp - 1], half, 0
        elif stage[sp] == 1:  # first half summed: descend into the second
            left[sp] = ret
            stage[sp] = 2
            sp += 1
            los[sp], ns[sp], stage[sp] = los[sp - 1] + half, m - half, 0
        else:  # both halves summed
            ret = left[sp] + ret
            sp -= 1
    return ret


@numba.njit(nogil=True, cache=True)
def _p95(finite: np.ndarray) -> float:
    """numpy.percentile(finite, 95) for a non-empty array of finite values."""
    n = finite.shape[0]
    virtual = (n - 1) * _Q95
    if virtual >= n - 1:
        below = -1.0  # numpy marks both neighbours -1 (the last value) and keeps that in the weight
        lo = hi = n - 1
    else:
        below = math.floor(virtual)
        lo = int(below)
        hi = lo + 1
    gamma = virtual - below
    part = np.partition(finite, lo)
    a = part[lo]
    b = a
    if hi != lo:
        b = part[hi]
        for k in range(hi + 1, n):
            if part[k] < b:
                b = part[k]
    diff = b - a
    if gamma >= 0.5:
        return b - diff * (1 - gamma)
    return a + diff * gamma


@numba.njit(nogil=True, cache=True)
def summarize_series(offsets: np.ndarray, values: np.ndarray):
    """Per series [offsets[s]:offsets[s+1]] of `values`: (counts[s, 4] = finite, NaN, +inf, -inf points;
    stats[s, 4] = min, max, mean, p95 over the finite points, NaN where a series has none)."""
    n_series = offsets.shape[0] - 1
    counts = np.zeros((n_series, 4), dtype=np.int64)
    stats = np.full((n_series, 4), np.nan)
    scratch = np.empty(0, dtype=np.float64)
    for s in range(n_series):
        lo = offsets[s]
        hi = offsets[s + 1]
        if scratch.shape[0] < hi - lo:
            scratch = np.empty(hi - lo, dtype=np.float64)
        m = 0
        for k in range(lo, hi):
            v = values[k]
            if math.isnan(v):
                counts[s, 1] += 1
            elif v == np.inf:
                counts[s, 2] += 1
            elif v == -np.inf:
                counts[s, 3] += 1
            else:
                scratch[m] = v
                m += 1
        counts[s, 0] = m
        if m == 0:
            continue
        finite = scratch[:m]
        low = finite[0]
        high = finite[0]
        for k in range(1, m):
            if finite[k] < low:
                low = finite[k]
            if finite[k] > high:
                high = finite[k]
        stats[s, 0] = low
        stats[s, 1] = high
        stats[s, 2] = (0.0 + _pairwise_sum(finite, 0, m)) / m
        stats[s, 3] = _p95(finite)
    return counts, stats
