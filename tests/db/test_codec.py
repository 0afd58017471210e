"""Tests for db.codec: the binary encodings of a series' iterations and values (pure, no database)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fp8_policy.db.codec import CorruptSeries, decode_iterations, decode_values, encode_iterations, encode_values

RNG_SEED = 20261121
REALISTIC_POINTS = 3661


def roundtrip_iterations(iterations: list[int] | np.ndarray) -> np.ndarray:
    decoded = decode_iterations(encode_iterations(np.asarray(iterations, dtype=np.int64)))
    assert decoded.dtype == np.int64
    return decoded


def bits(values: np.ndarray) -> list[int]:
    return np.asarray(values, dtype=np.float64).view(np.uint64).tolist()


# --- iterations ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "iterations",
    [
        [],
        [0],
        [1_234_567],
        list(range(0, 250, 10)),
        list(range(5, 100_000, 1)),
        list(range(1_000_000, 9_999_999, 250_000)),  # 7-digit iterations
        list(range(10**12, 10**12 + 50 * 7, 7)),
    ],
    ids=["empty", "one", "one-7-digit", "freq-10", "step-1", "7-digit-range", "huge-start"],
)
def test_arithmetic_progressions_round_trip_as_a_range(iterations: list[int]) -> None:
    blob = encode_iterations(np.asarray(iterations, dtype=np.int64))

    assert roundtrip_iterations(iterations).tolist() == iterations
    assert blob[:1] == b"r" and len(blob) == 25  # tag + start, step, count


@pytest.mark.parametrize(
    "iterations",
    [
        [0, 1, 5, 100, 101, 1_000_000],
        [0, 10, 20, 35, 40],
        [999_990, 1_000_000, 1_000_010, 1_234_567, 9_999_999],  # 6- and 7-digit mixed
        [7, 3, 5],  # not sorted: still exact
        [-5, 0, 5, 20],
        [0, 0, 1],
    ],
    ids=["irregular", "one-gap", "7-digit-irregular", "unsorted", "negative", "repeated"],
)
def test_irregular_iterations_round_trip_as_deltas(iterations: list[int]) -> None:
    blob = encode_iterations(np.asarray(iterations, dtype=np.int64))

    assert blob[:1] == b"d"
    assert roundtrip_iterations(iterations).tolist() == iterations


def test_long_irregular_7_digit_iterations_round_trip() -> None:
    rng = np.random.default_rng(RNG_SEED)
    iterations = np.cumsum(rng.integers(1, 5000, 10_000)) + 1_000_000

    assert np.array_equal(roundtrip_iterations(iterations), iterations)


# --- values -------------------------------------------------------------------------------------------------------


def test_nan_infinities_and_negative_zero_stay_distinguishable() -> None:
    values = np.array([math.nan, math.inf, -math.inf, -0.0, 0.0, 1.5, -2.6673])

    decoded = decode_values(encode_values(values))

    assert np.isnan(decoded[0])
    assert decoded[1:3].tolist() == [math.inf, -math.inf]
    assert bits(decoded[3:5]) == bits(np.array([-0.0, 0.0]))
    assert decoded[5:].tolist() == [1.5, -2.6673]


@pytest.mark.parametrize("low, high", [(0, 5), (0, 100), (-800, 800)])
def test_four_decimal_values_come_back_exactly(low: float, high: float) -> None:
    rng = np.random.default_rng(RNG_SEED)
    texts = [f"{v:.4f}" for v in rng.uniform(low, high, 5000)]
    values = np.array([float(t) for t in texts])

    decoded = decode_values(encode_values(values))

    assert [f"{v:.4f}" for v in decoded.tolist()] == texts
    assert decoded.tolist() == values.tolist()


def test_empty_and_single_values() -> None:
    assert decode_values(encode_values(np.array([]))).tolist() == []
    assert decode_values(encode_values(np.array([21.4681]))).tolist() == [21.4681]


def test_incompressible_values_are_stored_raw_and_compressible_ones_zlib() -> None:
    rng = np.random.default_rng(RNG_SEED)

    assert encode_values(rng.standard_normal(4)).startswith(b"f")  # too short to compress
    assert encode_values(np.zeros(1000)).startswith(b"z")
    assert len(encode_values(np.zeros(1000))) < 100


@pytest.mark.parametrize("blob", [b"", b"?abc", b"r" + bytes(24)])
def test_unknown_value_encoding_raises_corrupt_series(blob: bytes) -> None:
    with pytest.raises(CorruptSeries, match=f"unknown values encoding {blob[:1]!r}"):
        decode_values(blob)


def test_unknown_iteration_encoding_raises_corrupt_series() -> None:
    with pytest.raises(CorruptSeries, match="unknown iterations encoding b'x'"):
        decode_iterations(b"x123")


# --- size ------------------------------------------------------------------------------------------------------------


def _realistic_series(kind: str, rng: np.random.Generator) -> np.ndarray:
    n = REALISTIC_POINTS
    if kind == "uniform":  # worst case: no structure at all
        raw = rng.uniform(0, 5, n)
    elif kind == "random-walk":
        raw = 2.5 + np.cumsum(rng.normal(0, 0.05, n))
    elif kind == "decaying-underflows":
        raw = 5 * np.exp(-np.arange(n) / 500) + np.abs(rng.normal(0, 0.01, n))
    else:  # mostly zero, like mse or underflows% of a healthy layer
        raw = np.where(rng.random(n) < 0.8, 0.0, rng.uniform(0, 5, n))
    return np.round(np.clip(raw, 0, 5), 4)


@pytest.mark.parametrize("kind", ["uniform", "random-walk", "decaying-underflows", "mostly-zero"])
def test_stored_size_is_at_most_4_bytes_per_point(kind: str) -> None:
    rng = np.random.default_rng(RNG_SEED)
    values = _realistic_series(kind, rng)
    iterations = np.arange(REALISTIC_POINTS, dtype=np.int64) * 10

    stored = len(encode_values(values)) + len(encode_iterations(iterations))

    print(f"{kind}: {stored} bytes for {REALISTIC_POINTS} points = {stored / REALISTIC_POINTS:.3f} bytes/point")
    assert stored / REALISTIC_POINTS <= 4.0
    assert np.array_equal(decode_values(encode_values(values)), values)
