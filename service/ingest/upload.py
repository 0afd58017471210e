"""Receive an upload body as a stream: to a file on disk, hashed while written, never whole in memory.

Two request shapes: `multipart/form-data` with a `file` part (plus optional `name`, `project`,
`tags`, `metadata` fields), or a raw body with an archive/log content type. The size limit is
enforced while streaming (and up front from Content-Length), so an oversized upload is cut off
at the limit.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
from python_multipart.multipart import MultipartParser, parse_options_header

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks  # defined for type checkers only
from starlette.requests import Request

from fp8_policy.service.errors import AppError, EmptyUpload, InvalidUpload, UnsupportedMediaType, UploadTooLarge
from fp8_policy.service.storage.disk import hold_part, is_out_of_space, out_of_space

RAW_TYPES = {
    "application/gzip",
    "application/x-gzip",
    "application/x-tar",
    "application/x-gtar",
    "application/zip",
    "application/x-zip-compressed",
    "application/octet-stream",
    "text/plain",
}
FORM_FIELDS = ("name", "project", "tags", "metadata")
MAX_FIELD_BYTES = 64 * 1024
BATCH_BYTES = 1024 * 1024  # body bytes handed to a worker thread at a time


@dataclass(slots=True)
class ReceivedUpload:
    path: Path
    sha256: str
    size: int
    filename: str | None
    fields: dict[str, str] = field(default_factory=dict)
    held: int | None = None  # a descriptor keeping the file's `flock` until its run row is committed

    def release(self) -> None:
        """Drop the lock on the received file (after the transaction that stored it ended); idempotent."""
        if self.held is not None:
            os.close(self.held)
            self.held = None


class _HashingFile:
    """Writes chunks to `path`, hashing and counting them; raises UploadTooLarge past the limit and
    InsufficientStorage (507) when the disk is full. The file is held (service/storage/disk.py) until closed, so the
    start-up sweep can tell a live upload from one a killed process left behind."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.size = 0
        self.hash = hashlib.sha256()
        try:
            self.handle = open(path, "xb")  # noqa: SIM115 - closed in close() or discard()
        except OSError as exc:
            raise (out_of_space(exc) if is_out_of_space(exc) else exc) from exc
        hold_part(self.handle)

    def write(self, data: bytes | memoryview) -> None:
        self.size += len(data)
        if self.size > self.max_bytes:
            raise UploadTooLarge(f"upload exceeds the limit of {self.max_bytes} bytes")
        self.hash.update(data)
        try:
            self.handle.write(data)
        except OSError as exc:
            raise (out_of_space(exc) if is_out_of_space(exc) else exc) from exc

    def close(self) -> int:
        """Close the file and return a descriptor that still holds its lock (the same open file description):
        the file stays marked as in use while it is moved to the archive and its run row is committed, so neither
        the `.part` sweep nor the orphan sweep (service/runs/orphans.py) of another process can take it."""
        held = os.dup(self.handle.fileno())
        try:
            self.handle.close()  # flushes: on a full disk this is where ENOSPC may surface
        except OSError as exc:
            os.close(held)
            raise (out_of_space(exc) if is_out_of_space(exc) else exc) from exc
        return held

    def discard(self) -> None:
        """Close and remove the file; never raises (closing a file on a full disk fails again: the unlink
        must happen anyway, or the `.part` keeps the disk full)."""
        try:
            self.handle.close()
        except OSError:
            pass
        finally:
            self.path.unlink(missing_ok=True)


async def receive_upload(
    request: Request, dest: Path, max_bytes: int, limiter: anyio.CapacityLimiter | None = None
) -> ReceivedUpload:
    """Stream the request body to `dest`; on any error `dest` is removed before raising.

    Hashing, multipart parsing and disk writes run in worker threads of `limiter` (default: anyio's shared one),
    never on the event loop."""
    media_type = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
    declared = request.headers.get("content-length")
    if (
        declared
        and declared.isascii()
        and declared.isdigit()
        and int(declared) > max_bytes + (MAX_FIELD_BYTES if media_type.startswith("multipart/") else 0)
    ):
        raise UploadTooLarge(f"upload of {declared} bytes exceeds the limit of {max_bytes} bytes")
    sink = _HashingFile(dest, max_bytes)
    try:
        if media_type == "multipart/form-data":
            filename, fields = await _receive_multipart(request, sink, limiter)
        elif media_type in RAW_TYPES:
            await _pump(request, sink.write, limiter)
            filename, fields = None, {}
        else:
            raise UnsupportedMediaType(
                f"content type {media_type or '(none)'!r} is not accepted; send multipart/form-data with a "
                "'file' part, or a raw body as application/gzip, application/x-tar, application/zip or text/plain"
            )
        if sink.size == 0:
            raise EmptyUpload("the upload is empty")
        held = sink.close()
    except BaseException:
        sink.discard()
        raise
    return ReceivedUpload(dest, sink.hash.hexdigest(), sink.size, filename, fields, held)


class _FormSink:
    """python-multipart callbacks: the `file` part goes to disk, small text fields to memory."""

    def __init__(self, sink: _HashingFile) -> None:
        self.sink = sink
        self.fields: dict[str, str] = {}
        self.filename: str | None = None
        self.file_parts = 0
        self._headers: dict[bytes, bytes] = {}
        self._field_name = b""
        self._header_value = b""
        self._current: str | None = None
        self._buffer = bytearray()

    def callbacks(self) -> MultipartCallbacks:
        return {
            "on_part_begin": self._begin,
            "on_header_field": lambda d, s, e: self._append("_field_name", d[s:e]),
            "on_header_value": lambda d, s, e: self._append("_header_value", d[s:e]),
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_part_data": self._data,
            "on_part_end": self._end,
        }

    def _append(self, attr: str, data: bytes) -> None:
        setattr(self, attr, getattr(self, attr) + data)

    def _begin(self) -> None:
        self._headers, self._current, self._buffer = {}, None, bytearray()

    def _header_end(self) -> None:
        self._headers[self._field_name.lower()] = self._header_value
        self._field_name, self._header_value = b"", b""

    def _headers_finished(self) -> None:
        _, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        name = options.get(b"name", b"").decode("utf-8", "replace")
        if name == "file":
            self.file_parts += 1
            if self.file_parts > 1:
                raise InvalidUpload("send exactly one 'file' part")
            raw_name = options.get(b"filename")
            self.filename = raw_name.decode("utf-8", "replace") if raw_name else None
        self._current = name

    def _data(self, data: bytes, start: int, end: int) -> None:
        if self._current == "file":
            self.sink.write(memoryview(data)[start:end])
        elif self._current in FORM_FIELDS:
            self._buffer += data[start:end]
            if len(self._buffer) > MAX_FIELD_BYTES:
                raise InvalidUpload(f"form field {self._current!r} is longer than {MAX_FIELD_BYTES} bytes")

    def _end(self) -> None:
        if self._current in FORM_FIELDS:
            self.fields[self._current] = self._buffer.decode("utf-8", "replace")


async def _pump(request: Request, feed: Callable[[bytes], object], limiter: anyio.CapacityLimiter | None) -> None:
    """Hand the body to `feed` in batches of about BATCH_BYTES, each call in a worker thread: the event loop only
    appends received chunks to a buffer."""
    pending = bytearray()
    async for chunk in request.stream():
        pending += chunk
        if len(pending) >= BATCH_BYTES:
            batch = bytes(pending)
            pending.clear()
            await anyio.to_thread.run_sync(feed, batch, limiter=limiter)
    if pending:
        await anyio.to_thread.run_sync(feed, bytes(pending), limiter=limiter)


async def _receive_multipart(
    request: Request, sink: _HashingFile, limiter: anyio.CapacityLimiter | None
) -> tuple[str | None, dict[str, str]]:
    _, params = parse_options_header(request.headers.get("content-type"))
    boundary = params.get(b"boundary")
    if not boundary:
        raise InvalidUpload("multipart/form-data without a boundary")
    form = _FormSink(sink)
    parser = MultipartParser(boundary, form.callbacks())
    try:
        await _pump(request, parser.write, limiter)
        parser.finalize()
    except (AppError, OSError):  # ours (field limits, size limit, body timeout, full disk) or the server's
        raise
    except Exception as exc:  # python-multipart raises several parse error types
        raise InvalidUpload(f"malformed multipart body: {exc}") from exc
    if form.file_parts == 0:
        raise InvalidUpload("multipart upload has no 'file' part")
    return form.filename, form.fields


def new_upload_path(upload_dir: Path) -> Path:
    upload_dir.mkdir(parents=True, exist_ok=True)
    return upload_dir / f"{os.urandom(12).hex()}.part"
