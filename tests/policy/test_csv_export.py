"""policy.csv_export: the compiled row writer gives exactly the bytes Python's own formatting gives."""

from __future__ import annotations

import csv
import io
import math

import numpy as np
import pytest

from fp8_policy.policy import csv_export


def _python_reference(prefix: bytes, iterations: np.ndarray, values: np.ndarray) -> bytes:
    head = prefix.decode()
    return "".join(f"{head}{i},{v:.4f}\n" for i, v in zip(iterations.tolist(), values.tolist(), strict=True)).encode()


def _written(prefix: bytes, iterations: np.ndarray, values: np.ndarray) -> bytes:
    return b"".join(csv_export.series_rows(prefix, iterations, values))


EDGES = [
    0.0,
    -0.0,
    1e-5,
    4.9e-5,
    5e-5,
    5.0001e-5,
    -5e-5,
    0.00015,
    0.00025,
    0.12345,
    0.99995,
    1.0,
    21.4701,
    99.99995,
    100.0,
    -3.14159,
    1234567.8912,
    4.5e11,
    4.6e11,
    1e15,
    1e300,
    -1e300,
    5e-324,
    math.nan,
    math.inf,
    -math.inf,
    2.675,
    1.00005,
    0.30000000000000004,
]


def test_edge_values_match_python_formatting() -> None:
    values = np.array(EDGES)
    iterations = np.arange(len(values), dtype=np.int64) * 1_000_003
    prefix = b"0,model.layers.1.mlp,activation,,underflows%,"

    assert _written(prefix, iterations, values) == _python_reference(prefix, iterations, values)


@pytest.mark.parametrize("scale", [1e-3, 1.0, 100.0, 1e6, 1e12])
def test_random_values_match_python_formatting(scale: float) -> None:
    rng = np.random.default_rng(int(scale) % 1000 + 7)
    raw = rng.standard_normal(20_000) * scale
    rounded = np.round(raw, 4)  # what the database codec hands out
    halves = (np.floor(rng.uniform(0, 1e6, 5_000)) + 0.5) / 1e4  # exact decimal ties in binary neighbourhood
    values = np.concatenate([raw, rounded, halves, -halves])
    iterations = rng.integers(0, 10**12, len(values))

    assert _written(b"x,", iterations, values) == _python_reference(b"x,", iterations, values)


def test_large_series_come_in_bounded_pieces_that_join_to_the_whole() -> None:
    n = 300_000
    iterations = np.arange(n, dtype=np.int64)
    values = np.linspace(0, 100, n)
    prefix = csv_export.row_prefix("bionemo", 0, "model.layers.3.self_attention.proj", "gradient", None, "underflows%")

    pieces = list(csv_export.series_rows(prefix, iterations, values))

    assert len(pieces) > 1 and max(map(len, pieces)) <= csv_export.CHUNK_BYTES
    assert b"".join(pieces) == _python_reference(prefix, iterations, values)


def test_prefix_quotes_names_as_the_csv_module_does() -> None:
    prefix = csv_export.row_prefix("long", 3, 'odd,"name"', "weight", "fp8_e4m3", "mse")

    row = next(csv.reader(io.StringIO(prefix.decode() + "7,0.5000")))

    assert row == ["3", 'odd,"name"', "weight", "fp8_e4m3", "mse", "7", "0.5000"]
    assert csv_export.header("bionemo") == b"metric_name,iteration,value\n"


def test_empty_series_writes_nothing() -> None:
    assert _written(b"a,", np.array([], dtype=np.int64), np.array([])) == b""
