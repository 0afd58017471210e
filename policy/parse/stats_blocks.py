"""Reading one rank's statistics log into blocks of whole lines: the file handling of the parser.

Belongs here: what the parser reads from (a binary stream's read(n) or readinto), cutting the bytes into blocks
that end on a newline, carrying a partial line over to the next block, dropping a line longer than the limit,
and the read buffers kept between parses (policy/parse/buffer_pool.py). What a line means is policy/parse/stats_log.py's;
scanning a block is policy/parse/stats_scan.py's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol, cast, runtime_checkable

import numpy as np

from fp8_policy.policy.parse import kernels
from fp8_policy.policy.parse.buffer_pool import FreeList

kernel = kernels.stats  # compiled once loaded in this process, interpreted before (policy/parse/kernels.py)

DEFAULT_BLOCK_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_LINE_BYTES = 1024 * 1024


class ReadsBytes(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


@runtime_checkable
class ReadsInto(Protocol):
    def readinto(self, buffer: memoryview, /) -> int | None: ...


# What the parser reads from: a binary stream's read(n), or its readinto (one copy less) when it has one.
ByteStream = ReadsInto | ReadsBytes


def _readinto_of(stream: ByteStream) -> Callable[[memoryview], int | None]:
    """The stream's readinto, or one made from its read(n) (a copy more)."""
    readinto_of_stream = getattr(stream, "readinto", None)  # what isinstance(stream, ReadsInto) checks, without
    if readinto_of_stream is not None:  # a runtime Protocol check's cost (0.2 ms a call, twice per parsed file)
        return cast(Callable[[memoryview], int | None], readinto_of_stream)

    reads = cast(ReadsBytes, stream)

    def readinto(view: memoryview) -> int:
        chunk = reads.read(len(view))
        view[: len(chunk)] = chunk
        return len(chunk)

    return readinto


def _read_into(stream: ByteStream, view: memoryview) -> int:
    """Fill `view` as far as the stream allows (readinto may return short reads)."""
    filled = 0
    readinto = _readinto_of(stream)
    while filled < len(view):
        got = readinto(view[filled:])
        if not got:
            break
        filled += got
    return filled


# Block buffers kept between parses in this process (policy/parse/buffer_pool.py); a parse with `workers` scan threads
# has about `workers + 2` of them in flight.
_READ_BUFFERS: FreeList[np.ndarray] = FreeList(6, lambda buf: int(buf.shape[0]))


def read_blocks(stream: ByteStream, block_bytes: int, max_line_bytes: int) -> Iterator[np.ndarray | None]:
    """Blocks of whole lines, read with readinto into uninitialised buffers (no zero-fill, no copies).

    A buffer is reused only after its block was absorbed (`recycle`), since a worker thread may
    still be scanning it before that. None stands for one line longer than max_line_bytes (dropped).
    """
    carry = b""
    discarding = False
    while True:
        buf = _buffer(len(carry) + block_bytes)
        buf[: len(carry)] = np.frombuffer(carry, dtype=np.uint8)
        got = _read_into(stream, buf.data[len(carry) :])
        if got == 0:
            break
        total = len(carry) + got
        start = 0
        if discarding:
            cut = kernel.find_newline(buf, 0, total)
            if cut < 0:
                carry = b""
                continue
            start, discarding = cut + 1, False
        last_nl = kernel.rfind_newline(buf, start, total)
        if last_nl >= 0:
            yield buf[start : last_nl + 1]
            start = last_nl + 1
        carry = buf[start:total].tobytes()
        if len(carry) > max_line_bytes:
            yield None
            carry, discarding = b"", True
    if carry:
        yield np.frombuffer(carry, dtype=np.uint8)  # read-only: stats_scan.scan copies it before the kernel


def _buffer(size: int) -> np.ndarray:
    """A read buffer: a recycled one (its block was absorbed; kept in the process's free list) or a new one.

    Recycling matters: a fresh buffer page-faults on every 4 KiB it is read into, which cost
    about as much as the read itself on the 6M-line benchmark.
    """
    buf = _READ_BUFFERS.take(size)
    return np.empty(size, dtype=np.uint8) if buf is None else buf[:size]


def recycle(block: np.ndarray) -> None:
    """Give the buffer under an absorbed block back to the free list (a block of the last carry has none)."""
    base = block.base
    if isinstance(base, np.ndarray) and base.base is None:
        _READ_BUFFERS.give(base)
