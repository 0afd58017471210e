"""Format detection by content (magic bytes, tar header, first log line), never by the upload's name."""

from __future__ import annotations

import re
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from isal import igzip

from fp8_policy.service.ingest.archive.errors import ArchiveError

PEEK_BYTES = 64 * 1024

_GZIP_MAGIC = b"\x1f\x8b"
_ZIP_MAGIC = b"PK\x03\x04"
_ZIP_EMPTY_MAGIC = b"PK\x05\x06"
_TAR_MAGIC = b"ustar"  # POSIX and GNU tar headers, at offset 257
_TAR_MAGIC_OFFSET = 257
_UTF8_BOM = b"\xef\xbb\xbf"
_LOG_LINE = re.compile(rb"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3} - [A-Z]+ - ")


def _detect_format(src: Path | IO[bytes]) -> str:
    """`src` is a path or a seekable binary stream (left at offset 0)."""
    with open_source(src) as handle:
        head = _read_up_to(handle, PEEK_BYTES)
    if head.startswith(_GZIP_MAGIC):
        with open_source(src) as handle, igzip.open(handle, "rb") as gz:
            inner = _read_up_to(gz, PEEK_BYTES)
        if _is_tar(inner):
            return "tar.gz"
        _require_text_log(inner, "the gzipped content")
        return "log.gz"
    if head.startswith(_ZIP_EMPTY_MAGIC):
        raise ArchiveError("NoStatsFile", "the zip archive is empty")
    if head.startswith(_ZIP_MAGIC):
        return "zip"
    if _is_tar(head):
        return "tar"
    _require_text_log(head, "the upload")
    return "log"


@contextmanager
def open_source(src: Path | IO[bytes], buffering: int = -1) -> Iterator[IO[bytes]]:
    """The upload as a binary stream from its start: a path is opened (and closed); a stream (an archive
    read from the store) is rewound and left open for its owner."""
    if isinstance(src, (str, Path)):
        with open(src, "rb", buffering=buffering) as handle:
            yield handle
    else:
        src.seek(0)
        yield src
        src.seek(0)


def _read_up_to(handle: IO[bytes], n: int) -> bytes:
    chunks: list[bytes] = []
    remaining = n
    while remaining > 0 and (chunk := handle.read(remaining)):
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _is_tar(head: bytes) -> bool:
    if head[_TAR_MAGIC_OFFSET : _TAR_MAGIC_OFFSET + len(_TAR_MAGIC)] == _TAR_MAGIC:
        return True
    # An empty tar is only its end-of-archive marker: two or more zero blocks.
    return len(head) >= 2 * tarfile.BLOCKSIZE and not head.strip(b"\0")


def _require_text_log(head: bytes, what: str) -> None:
    lines = [line for line in head.removeprefix(_UTF8_BOM).splitlines() if line.strip()]
    if not lines:
        raise ArchiveError("EmptyUpload", f"{what} has no content")
    if not _LOG_LINE.match(lines[0]):
        raise ArchiveError(
            "NotAnArchive",
            f"{what} is not a tar.gz, tar, zip, gzip or 'YYYY-MM-DD HH:MM:SS,mmm - LEVEL - ' log",
        )
