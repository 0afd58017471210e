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
# A range-encoded series describes its length in 8 bytes: a damaged row must not make a read allocate 2^63
# points. 2^28 points is far beyond any logged run (one point per iteration per series) and 2 GiB of int64.
MAX_SERIES_POINTS = 2**28


class CorruptSeries(ValueError):
    """Stored bytes that do not decode: a bug or a damaged database, never user input. Decoding raises nothing
    else, whatever the bytes (tests/db/test_codec_properties.py)."""


def encode_values(values: np.ndarray) -> bytes:
    raw = np.ascontiguousarray(values, dtype="<f4")
    packed = isal_zlib.compress(raw, 1)  # ISA-L: zlib format, several times faster than zlib
    return _VALUES_ZLIB + packed if len(packed) < raw.nbytes else _VALUES_RAW + raw.tobytes()


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
    if len(body) % 4:
        raise CorruptSeries(f"values of {len(body)} bytes are not float32s")
    values = np.frombuffer(body, dtype="<f4").astype(np.float64)
    return np.round(values, DECIMALS)


def encode_iterations(iterations: np.ndarray) -> bytes:
    it = np.ascontiguousarray(iterations, dtype=np.int64)
    n = it.shape[0]
    if n == 0:
        return _ITER_RANGE + _RANGE.pack(0, 1, 0)
    step = int(it[1] - it[0]) if n > 1 else 1
    deltas = np.diff(it)
    if n == 1 or (step > 0 and bool((deltas == step).all())):
        return _ITER_RANGE + _RANGE.pack(int(it[0]), step, n)
    return _ITER_DELTAS + _FIRST.pack(int(it[0])) + isal_zlib.compress(deltas.astype("<i8"), 1)


def decode_iterations(blob: bytes) -> np.ndarray:
    tag, body = blob[:1], blob[1:]
    if tag == _ITER_RANGE:
        if len(body) != _RANGE.size:
            raise CorruptSeries(f"an iteration range of {len(body)} bytes instead of {_RANGE.size}")
        start, step, count = _RANGE.unpack(body)
        if not 0 <= count <= MAX_SERIES_POINTS:
            raise CorruptSeries(f"an iteration range of {count} points")
        iterations: np.ndarray = start + step * np.arange(count, dtype=np.int64)
        return iterations
    if tag == _ITER_DELTAS:
        if len(body) < _FIRST.size:
            raise CorruptSeries(f"iteration deltas of {len(body)} bytes have no first iteration")
        (first,) = _FIRST.unpack(body[: _FIRST.size])
        raw = _inflate(body[_FIRST.size :])
        if len(raw) % 8:
            raise CorruptSeries(f"iteration deltas of {len(raw)} bytes are not int64s")
        deltas = np.frombuffer(raw, dtype="<i8")
        out = np.empty(deltas.shape[0] + 1, dtype=np.int64)
        out[0] = first
        np.cumsum(deltas, out=out[1:])
        out[1:] += first
        return out
    raise CorruptSeries(f"unknown iterations encoding {tag!r}")
