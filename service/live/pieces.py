"""A live run's piece on its way to disk: received into a file, never whole in memory, and only so many at once.

A piece may be 64 MiB; held as bytes (then joined, then sliced) twelve concurrent pieces added 1.5–2.1 GB to the
API process. Here a piece's body is written to a `.part` file in the uploads directory as it arrives (1 MiB
batches in worker threads; the `.part` is held under `flock` like an upload's, so the start-up sweep of
service/storage/disk.py removes it if the process dies), compared with and appended to the live file 1 MiB at a time,
and its new whole lines are handed to the parser as a bounded stream of the live file. Pieces being received or
stored at once are capped (`max_concurrent_pieces`, 503 `TooManyPieces` with `Retry-After` beyond, answered before
the body is read), and their disk and parse work runs in `piece_workers` threads, so memory stays bounded by a
few parser blocks whatever clients send.

Belongs here: receiving a piece, the cap, and reading byte ranges of files. Must not be here: the offset rules
and the detectors (service/live/actions.py).
"""

from __future__ import annotations

import io
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any

import anyio
from starlette.requests import Request

from fp8_policy.service.errors import PieceTooLarge, TooManyPieces
from fp8_policy.service.storage.disk import hold_part, is_out_of_space, out_of_space

COPY_BYTES = 1024 * 1024  # compared / copied / handed to a worker thread at a time


class PieceGate:
    """At most `max_pieces` pieces received or stored at once; their blocking work in `workers` threads."""

    def __init__(self, max_pieces: int, workers: int) -> None:
        self.max_pieces = max_pieces
        self.active = 0
        self.limiter = anyio.CapacityLimiter(workers)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[anyio.CapacityLimiter]:
        """Hold one piece slot (the event loop is single-threaded: the counter needs no lock)."""
        if self.active >= self.max_pieces:
            raise TooManyPieces(
                f"{self.active} live pieces are being received, the limit is {self.max_pieces}; retry in a few seconds"
            )
        self.active += 1
        try:
            yield self.limiter
        finally:
            self.active -= 1


class Piece:
    """The bytes of one piece: in memory (small callers, tests) or in a received file."""

    def __init__(self, data: bytes | None = None, path: Path | None = None, size: int | None = None) -> None:
        self.data, self.path = data, path
        self.size = len(data) if data is not None else int(size if size is not None else 0)

    def chunks(self, start: int, length: int) -> Iterator[bytes | memoryview]:
        """The piece's bytes [start, start + length) in pieces of at most COPY_BYTES."""
        if self.data is not None:
            view = memoryview(self.data)
            for at in range(start, start + length, COPY_BYTES):
                yield view[at : min(at + COPY_BYTES, start + length)]
            return
        assert self.path is not None
        with open(self.path, "rb") as handle:
            handle.seek(start)
            left = length
            while left > 0:
                chunk = handle.read(min(COPY_BYTES, left))
                if not chunk:
                    raise OSError(f"{self.path} is shorter than its {self.size} received bytes")
                left -= len(chunk)
                yield chunk

    def matches(self, handle: IO[bytes], length: int) -> bool:
        """Whether the next `length` bytes of `handle` equal the piece's first `length` bytes."""
        return all(handle.read(len(chunk)) == chunk for chunk in self.chunks(0, length))

    def write_from(self, handle: IO[bytes], start: int) -> int:
        """Append the piece's bytes from `start` on to `handle`; returns how many."""
        written = 0
        for chunk in self.chunks(start, self.size - start):
            handle.write(chunk)
            written += len(chunk)
        return written


def as_piece(body: bytes | Piece) -> Piece:
    return body if isinstance(body, Piece) else Piece(bytes(body))


class _PieceFile:
    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path, self.max_bytes, self.size = path, max_bytes, 0
        try:
            self.handle = open(path, "xb")  # noqa: SIM115 - closed in close()
        except OSError as exc:
            raise (out_of_space(exc) if is_out_of_space(exc) else exc) from exc
        hold_part(self.handle)

    def write(self, chunks: list[bytes]) -> None:
        try:
            self.handle.writelines(chunks)  # each chunk written as it came (no join: a copy less)
        except OSError as exc:
            raise (out_of_space(exc) if is_out_of_space(exc) else exc) from exc

    def close(self) -> None:
        try:
            self.handle.close()
        except OSError as exc:
            raise (out_of_space(exc) if is_out_of_space(exc) else exc) from exc


def too_large(max_bytes: int) -> PieceTooLarge:
    return PieceTooLarge(f"a piece is at most {max_bytes} bytes; send smaller pieces")


@asynccontextmanager
async def received_piece(
    request: Request, dest: Path, max_bytes: int, limiter: anyio.CapacityLimiter
) -> AsyncIterator[Piece]:
    """The request body as a Piece in the file `dest` (removed when the block ends, or on any error)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > max_bytes:
        raise too_large(max_bytes)
    dest.parent.mkdir(parents=True, exist_ok=True)
    sink = _PieceFile(dest, max_bytes)
    try:
        pending: list[bytes] = []  # the body's chunks as the server handed them, up to COPY_BYTES together
        held = 0
        async for chunk in request.stream():
            sink.size += len(chunk)
            if sink.size > max_bytes:
                raise too_large(max_bytes)
            pending.append(chunk)
            held += len(chunk)
            if held >= COPY_BYTES:
                await anyio.to_thread.run_sync(sink.write, pending, limiter=limiter)
                pending, held = [], 0
        if pending:
            await anyio.to_thread.run_sync(sink.write, pending, limiter=limiter)
        await anyio.to_thread.run_sync(sink.close, limiter=limiter)
        yield Piece(path=dest, size=sink.size)
    finally:
        sink.handle.close()
        dest.unlink(missing_ok=True)


# --- byte ranges of the live file --------------------------------------------------------------------------------


def last_newline(handle: IO[bytes], start: int, end: int) -> int:
    """Offset of the last b"\\n" in [start, end) of `handle`, read backwards 1 MiB at a time; -1 when none."""
    at = end
    while at > start:
        begin = max(start, at - COPY_BYTES)
        handle.seek(begin)
        found = handle.read(at - begin).rfind(b"\n")
        if found >= 0:
            return begin + found
        at = begin
    return -1


class Region(io.RawIOBase):
    """A read-only stream of `length` bytes of `handle` from its current position."""

    def __init__(self, handle: io.BufferedIOBase, length: int) -> None:
        self.handle, self.left = handle, length

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), self.left)
        if want <= 0:
            return 0
        got = self.handle.readinto(view[:want])
        got = got or 0
        self.left -= got
        return got


def new_part_path(uploads: Path) -> Path:
    return uploads / f"piece-{os.urandom(12).hex()}.part"
