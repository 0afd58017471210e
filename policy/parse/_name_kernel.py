"""Compiled metric-name table: name bytes -> series id, shared by the scan kernel and Python.

Open addressing over a 64-bit hash of the whole name (plus its length); every name's bytes are also
kept in an arena so the scanner can confirm a *predicted* id with a plain byte comparison instead of
hashing: nvdlfw_inspect writes the same names in the same cycle every logged iteration, so the id
that followed the previous line's id last time is almost always right. A prediction is only taken
when the bytes are equal, so it yields exactly the id the hash lookup would.

Writes (insert) happen in one thread at a time; other threads only read. An insert fills the arena,
the lengths and the key before publishing the id in `ids`, so a concurrent reader sees either no
entry (and the line takes the slow path) or a complete one.
"""

from __future__ import annotations

import numba
import numpy as np

from fp8_policy.policy.parse.name_table import MAX_NAMES, TABLE_SIZE, NameTable

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def id_for(table: NameTable, name: np.ndarray) -> int:
    """Series id of `name` (uint8 bytes) in `table`, inserting it when new; -1 when the table is full."""
    h = np.uint64(hash_name(name, 0, name.shape[0]))
    return int(lookup_or_insert(*table.arrays, h, name, 0, name.shape[0]))


@numba.njit(nogil=True, cache=True, inline="always")
def hash_name(buf: np.ndarray, start: int, stop: int) -> np.uint64:
    """FNV-1a over four interleaved byte lanes (breaks the multiply dependency chain), then mixed."""
    h0 = _FNV_OFFSET
    h1 = _FNV_OFFSET ^ np.uint64(1)
    h2 = _FNV_OFFSET ^ np.uint64(2)
    h3 = _FNV_OFFSET ^ np.uint64(3)
    i = start
    while i + 4 <= stop:
        h0 = (h0 ^ np.uint64(buf[i])) * _FNV_PRIME
        h1 = (h1 ^ np.uint64(buf[i + 1])) * _FNV_PRIME
        h2 = (h2 ^ np.uint64(buf[i + 2])) * _FNV_PRIME
        h3 = (h3 ^ np.uint64(buf[i + 3])) * _FNV_PRIME
        i += 4
    while i < stop:
        h0 = (h0 ^ np.uint64(buf[i])) * _FNV_PRIME
        i += 1
    h = h0 ^ (h1 * np.uint64(3)) ^ (h2 * np.uint64(5)) ^ (h3 * np.uint64(7)) ^ np.uint64(stop - start)
    h ^= h >> np.uint64(29)
    return h * _FNV_PRIME


@numba.njit(nogil=True, cache=True)
def lookup_or_insert(keys, lengths, ids, counter, arena, arena_off, sid_len, h, buf, start, length) -> int:
    """Series id for the name buf[start:start+length] with hash h; a new id when unseen, -1 when full.

    A new id is reported to the caller by being equal to the previous `counter[0]`.
    """
    mask = np.uint64(TABLE_SIZE - 1)
    slot = h & mask
    while True:
        sid = ids[slot]
        if sid < 0:
            if counter[0] >= MAX_NAMES:
                return -1
            sid = counter[0]
            counter[0] += 1
            sid_len[sid] = length
            if counter[1] + length <= arena.shape[0]:
                arena[counter[1] : counter[1] + length] = buf[start : start + length]
                arena_off[sid] = counter[1]
                counter[1] += length
            keys[slot] = h
            lengths[slot] = length
            ids[slot] = sid
            return sid
        if keys[slot] == h and lengths[slot] == length:
            return sid
        slot = (slot + np.uint64(1)) & mask


@numba.njit(nogil=True, cache=True, inline="always")
def lookup(keys, lengths, ids, h, length) -> int:
    """Read-only probe: the series id, or -1 when the name is not in the table."""
    mask = np.uint64(TABLE_SIZE - 1)
    slot = h & mask
    while True:
        sid = ids[slot]
        if sid < 0:
            return -1
        if keys[slot] == h and lengths[slot] == length:
            return sid
        slot = (slot + np.uint64(1)) & mask


@numba.njit(nogil=True, cache=True, inline="always")
def load_u64(buf: np.ndarray, i: int) -> np.uint64:
    """The 8 bytes buf[i:i+8] as one little-endian uint64 (the caller keeps i+8 within buf).

    Spelled as shifted byte loads, which LLVM merges into one unaligned load; `buf[i:i+8].view(np.uint64)[0]`
    builds an array view per call in numba and measured about 7x slower on the benchmark log."""
    return (
        np.uint64(buf[i])
        | (np.uint64(buf[i + 1]) << np.uint64(8))
        | (np.uint64(buf[i + 2]) << np.uint64(16))
        | (np.uint64(buf[i + 3]) << np.uint64(24))
        | (np.uint64(buf[i + 4]) << np.uint64(32))
        | (np.uint64(buf[i + 5]) << np.uint64(40))
        | (np.uint64(buf[i + 6]) << np.uint64(48))
        | (np.uint64(buf[i + 7]) << np.uint64(56))
    )


@numba.njit(nogil=True, cache=True, inline="always")
def same_name(arena, arena_off, sid_len, sid, buf, start, length) -> bool:
    """Whether buf[start:start+length] is exactly the stored name of `sid`: 8 bytes at a time (load_u64),
    then the tail byte by byte. This compare runs for nearly every line of a log."""
    off = arena_off[sid]
    if off < 0 or sid_len[sid] != length:
        return False
    diff = np.uint64(0)
    k = 0
    while k + 8 <= length:
        diff |= load_u64(arena, off + k) ^ load_u64(buf, start + k)
        k += 8
    while k < length:
        diff |= np.uint64(arena[off + k] ^ buf[start + k])
        k += 1
    return diff == 0
