"""Property-based tests of the point-array codec (db/codec.py).

* Any int64 iterations (sorted or not, gaps, the extremes, deltas that overflow) round-trip exactly.
* Any values round-trip to their 4-decimal rounding (|v| < 800, what the logs print), NaN and ±inf kept; the
  float32 rounding never moves a 4-decimal value of that range.
* Decoding arbitrary stored bytes never raises anything but CorruptSeries (a damaged row is reported as such,
  not as a random numpy/struct error), and never allocates more than the bytes can describe.
Budget: tests/support/fuzz.py (FP8_POLICY_FUZZ_EXAMPLES for longer runs).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from fp8_policy.db.codec import (
    MAX_SERIES_POINTS,
    CorruptSeries,
    decode_iterations,
    decode_values,
    encode_iterations,
    encode_values,
)
from tests.support.fuzz import fuzz

INT64 = st.integers(-(2**63), 2**63 - 1)


@fuzz(400)
@given(
    iterations=st.one_of(
        st.lists(INT64, max_size=200),
        st.lists(st.integers(0, 10**7), max_size=500).map(sorted),
        st.builds(
            lambda start, step, n: [start + step * k for k in range(n)],
            st.integers(0, 10**12),
            st.integers(1, 1000),
            st.integers(0, 300),
        ),
    )
)
def test_any_int64_iterations_round_trip_exactly(iterations: list[int]) -> None:
    array = np.asarray(iterations, dtype=np.int64)

    decoded = decode_iterations(encode_iterations(array))

    assert decoded.dtype == np.int64
    assert decoded.tolist() == array.tolist()


four_decimals = st.integers(-7_999_999, 7_999_999).map(lambda n: n / 10_000)
special = st.sampled_from([float("nan"), float("inf"), float("-inf"), 0.0, -0.0])


@fuzz(400)
@given(values=st.lists(st.one_of(four_decimals, special), max_size=300))
def test_logged_values_round_trip(values: list[float]) -> None:
    array = np.asarray(values, dtype=np.float64)

    decoded = decode_values(encode_values(array))

    assert decoded.shape == array.shape
    assert np.array_equal(decoded, array, equal_nan=True)
    assert np.array_equal(np.signbit(decoded[np.isinf(decoded)]), np.signbit(array[np.isinf(array)]))


@fuzz(500)
@given(
    blob=st.one_of(
        st.binary(max_size=200),
        st.builds(lambda tag, body: tag + body, st.sampled_from([b"f", b"z", b"r", b"d"]), st.binary(max_size=200)),
        # ranges with a damaged count: negative, beyond MAX_SERIES_POINTS, or modest (never a huge allocation here)
        st.builds(
            lambda start, step, count: b"r" + np.asarray([start, step, count], "<i8").tobytes(),
            INT64,
            INT64,
            st.one_of(st.integers(-(2**63), -1), st.integers(MAX_SERIES_POINTS + 1, 2**63 - 1), st.integers(0, 10_000)),
        ),
    )
)
def test_decoding_arbitrary_bytes_raises_only_corrupt_series(blob: bytes) -> None:
    for decode in (decode_values, decode_iterations):
        try:
            decoded = decode(blob)
        except CorruptSeries:
            continue
        assert decoded.ndim == 1
        assert decoded.shape[0] <= max(MAX_SERIES_POINTS if blob[:1] == b"r" else 0, len(blob) * 1100)
