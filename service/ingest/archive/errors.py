"""Refusals of an upload: the stable error codes, ArchiveError, and the exceptions that mean a damaged archive."""

from __future__ import annotations

import tarfile
import zipfile
import zlib
from typing import cast

from isal import igzip, isal_zlib

ERROR_CODES = frozenset(
    {
        "EmptyUpload",  # zero bytes, or only whitespace after decompression
        "NotAnArchive",  # not gzip / zip / tar / an nvdlfw_inspect text log
        "CorruptArchive",  # truncated gzip/tar/zip, bad CRC, bad headers
        "UnsafePath",  # `..`, absolute, drive letter, backslash, NUL, escapes dest, file/dir clash
        "UnsupportedMember",  # symlink, hard link, device, FIFO, sparse, encrypted or unknown compression
        "DuplicateMember",  # two members written to the same file
        "TooManyMembers",
        "ArchiveTooLarge",  # uncompressed total or one member over its limit
        "CompressionRatioExceeded",
        "NoStatsFile",  # nothing recognised as a statistics log (an empty zip included)
        "PathTooLong",  # a member name or path longer than a file system takes
        "RankOutOfRange",  # a globalrank-N above what the series table holds (2^31 - 1)
    }
)

# Everything a damaged archive can raise while being read. OSError in general is not here: a full disk is
# not the uploader's fault. BadGzipFile is the stdlib class, which isal re-exports.
_CORRUPT: tuple[type[BaseException], ...] = (
    EOFError,
    tarfile.TarError,
    zipfile.BadZipFile,
    igzip.BadGzipFile,
    # isal_zlib.pyi declares `error: Exception` (an instance); at run time it is the exception class.
    cast("type[BaseException]", isal_zlib.error),
    zlib.error,
    UnicodeDecodeError,
)


class ArchiveError(Exception):
    """An upload that is refused; `code` is one of ERROR_CODES and stable, `detail` is for humans."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
