"""The compiled series summaries (policy/parse/_summary_kernel.py) equal NumPy's per-series results exactly.

The reference is the straightforward NumPy code the summaries were computed with before the kernel:
`finite.mean()`, `np.percentile(finite, 95)`, min, max and the non-finite counts of each series. Equality is
exact (==), so a summation order or interpolation rule that differs from NumPy's fails here.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fp8_policy.policy.parse._summary_kernel import summarize_series
from fp8_policy.policy.parse.assemble import SeriesSummary, summaries, summarize


def numpy_summary(iterations: np.ndarray, values: np.ndarray) -> SeriesSummary:
    finite = values[np.isfinite(values)]
    n = int(values.shape[0])
    last = float(values[-1]) if n else None
    last_nonfinite = None
    if last is not None and not np.isfinite(last):
        last_nonfinite = "NaN" if np.isnan(last) else ("Infinity" if last > 0 else "-Infinity")
        last = None
    has = finite.shape[0] > 0
    return SeriesSummary(
        count=n,
        nan_count=int(np.count_nonzero(np.isnan(values))),
        posinf_count=int(np.count_nonzero(values == np.inf)),
        neginf_count=int(np.count_nonzero(values == -np.inf)),
        min=float(finite.min()) if has else None,
        max=float(finite.max()) if has else None,
        mean=float(finite.mean()) if has else None,
        p95=float(np.percentile(finite, 95)) if has else None,
        last=last,
        last_nonfinite=last_nonfinite,
        first_iteration=int(iterations[0]) if n else None,
        last_iteration=int(iterations[-1]) if n else None,
    )


log_values = st.one_of(
    st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False).map(lambda v: round(v, 4)),
    st.sampled_from([0.0, -0.0, 100.0, float("nan"), float("inf"), float("-inf")]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(log_values, max_size=300), min_size=1, max_size=6))
def test_summaries_equal_numpy_per_series(series: list[list[float]]) -> None:
    values = np.array([v for s in series for v in s], dtype=np.float64)
    offsets = np.concatenate(([0], np.cumsum([len(s) for s in series]))).astype(np.int64)
    iterations = np.arange(values.shape[0], dtype=np.int64) * 10
    got = summaries(offsets, iterations, values)
    for k, summary in enumerate(got):
        lo, hi = offsets[k], offsets[k + 1]
        assert summary == numpy_summary(iterations[lo:hi], values[lo:hi])


@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 127, 128, 129, 255, 256, 1000, 3661, 8191, 8192, 8193, 50_001])
def test_mean_and_p95_equal_numpy_at_the_summation_and_interpolation_edges(n: int) -> None:
    rng = np.random.default_rng(n)
    values = np.round(rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 3, n), 4)
    counts, stats = summarize_series(np.array([0, n], dtype=np.int64), values)
    assert counts[0].tolist() == [n, 0, 0, 0]
    assert stats[0, 2] == values.mean()
    assert stats[0, 3] == np.percentile(values, 95)
    assert (stats[0, 0], stats[0, 1]) == (values.min(), values.max())


def test_a_series_without_finite_points_has_no_statistics() -> None:
    values = np.array([np.nan, np.inf, -np.inf, np.nan])
    summary = summarize(np.arange(4), values)
    assert (summary.nan_count, summary.posinf_count, summary.neginf_count) == (2, 1, 1)
    assert (summary.min, summary.max, summary.mean, summary.p95) == (None, None, None, None)
    assert summary.last is None and summary.last_nonfinite == "NaN"
