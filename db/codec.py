"""Compact binary encodings of a series' iterations and values, as stored in `series` rows.

Values: float32 (NaN and ±inf survive bit-exactly, so they stay distinguishable), zlib-compressed
when that is smaller. The logs print 4 decimals, so decoding rounds back to 4 decimals: float32
keeps that exactly for |v| < ~800, which covers every percentage, scale and ratio the logs carry.
Iterations: an arithmetic progression (the usual `freq: N` schedule) is stored as three numbers;
anything else as zlib-compressed deltas. Both formats start with a one-byte tag so the encoding can
evolve without a migration.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np
from isal import isal_zlib

_VALUES_RAW = b"f"  # float32 little-endian
_VALUES_ZLIB = b"z"  # zlib(float32 little-endian)
_ITER_RANGE = b"r"  # start, step, count as int64
_ITER_DELTAS = b"d"  # first value int64, then zlib(int64 deltas)
_RANGE = struct.Struct("<qqq")
_FIRST = struct.Struct("<q")
DECIMALS = 4


class CorruptSeries(ValueError):
    """Stored bytes that do not decode: a bug or a damaged database, never user input."""


def encode_values(values: np.ndarray) -> bytes:
    raw = np.ascontiguousarray(values, dtype="<f4").tobytes()
    packed = isal_zlib.compress(raw, 1)  # ISA-L: zlib format, several times faster than zlib
    return _VALUES_ZLIB + packed if len(packed) < len(raw) else _VALUES_RAW + raw


def _inflate(body: bytes) -> bytes:
    try:
        return zlib.decompress(body)
    except zlib.error as exc:
        raise CorruptSeries(f"compressed series bytes do not decode: {exc}") from exc


def decode_values(blob: bytes) -> np.ndarray:
    tag, body = blob[:1], blob[1:]
    if tag == _VALUES_ZLIB:
        body = _inflate(body)
    elif tag != _VALUES_RAW:
        raise CorruptSeries(f"unknown values encoding {tag!r}")
    values = np.frombuffer(body, dtype="<f4").astype(np.float64)
    return np.round(values, DECIMALS)


def encode_iterations(iterations: np.ndarray) -> bytes:
    it = np.ascontiguousarray(iterations, dtype=np.int64)
    n = it.shape[0]
    if n == 0:
        return _ITER_RANGE + _RANGE.pack(0, 1, 0)
    step = int(it[1] - it[0]) if n > 1 else 1
    if n == 1 or (step > 0 and np.array_equal(np.diff(it), np.full(n - 1, step))):
        return _ITER_RANGE + _RANGE.pack(int(it[0]), step, n)
    deltas = np.diff(it).astype("<i8").tobytes()
    return _ITER_DELTAS + _FIRST.pack(int(it[0])) + isal_zlib.compress(deltas, 1)


def decode_iterations(blob: bytes) -> np.ndarray:
    tag, body = blob[:1], blob[1:]
    if tag == _ITER_RANGE:
        start, step, count = _RANGE.unpack(body)
        return start + step * np.arange(count, dtype=np.int64)
    if tag == _ITER_DELTAS:
        (first,) = _FIRST.unpack(body[: _FIRST.size])
        deltas = np.frombuffer(_inflate(body[_FIRST.size :]), dtype="<i8")
        out = np.empty(deltas.shape[0] + 1, dtype=np.int64)
        out[0] = first
        np.cumsum(deltas, out=out[1:])
        out[1:] += first
        return out
    raise CorruptSeries(f"unknown iterations encoding {tag!r}")
