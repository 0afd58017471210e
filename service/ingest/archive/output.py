"""Member paths and writing: safe relative paths, files created under dest only, and their removal on failure."""

from __future__ import annotations

import errno
import re
import shutil
from pathlib import Path
from typing import IO, Any

from isal import igzip

from fp8_policy.policy.parse.log_files import LogFile
from fp8_policy.policy.safe_text import displayable
from fp8_policy.service.ingest.archive.detect import _GZIP_MAGIC
from fp8_policy.service.ingest.archive.errors import ArchiveError
from fp8_policy.service.ingest.archive.limits import CHUNK_BYTES, _Budget, _Meter
from fp8_policy.service.limits import MAX_RANK

_DRIVE = re.compile(r"^[A-Za-z]:")
MAX_NAME_BYTES = 255  # NAME_MAX of Linux file systems (ext4, xfs, tmpfs)
MAX_PATH_BYTES = 1024  # well inside PATH_MAX (4096) once the work directory is in front


class _Output:
    """Creates files and directories under dest only, and remembers them so a failure can undo them."""

    def __init__(self, dest: Path) -> None:
        self.root = dest.resolve()
        self.created: list[Path] = []

    def new_file(self, relpath: str) -> IO[bytes]:
        target = self.root / relpath
        if not target.resolve().is_relative_to(self.root):
            raise ArchiveError("UnsafePath", f"{relpath}: resolves outside the work directory")
        self._make_dirs(target.parent, relpath)
        try:
            handle = open(target, "xb")  # noqa: SIM115 (closed by the caller) O_EXCL: never overwrites, never follows a planted symlink
        except (FileExistsError, IsADirectoryError):
            raise ArchiveError("DuplicateMember", f"{relpath}: written twice") from None
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:  # a deep work directory: the OS limit, not only ours
                raise ArchiveError("PathTooLong", f"{relpath[:80]}...: longer than the file system allows") from None
            raise
        self.created.append(target)
        return handle

    def _make_dirs(self, directory: Path, relpath: str) -> None:
        missing: list[Path] = []
        while not directory.exists():
            missing.append(directory)
            directory = directory.parent
        if not directory.is_dir():
            raise ArchiveError("UnsafePath", f"{relpath}: a parent folder is a file")
        for path in reversed(missing):
            try:
                path.mkdir()
            except OSError as exc:
                if exc.errno == errno.ENAMETOOLONG:
                    raise ArchiveError(
                        "PathTooLong", f"{relpath[:80]}...: longer than the file system allows"
                    ) from None
                raise
            self.created.append(path)

    def remove_all(self) -> None:
        for path in reversed(self.created):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        self.created.clear()


def _safe_relpath(name: str) -> str:
    """Normalise a member name to `a/b/c` ("" for the archive root), refusing anything that could escape.

    The result is always displayable text (policy/safe_text.py): tar decodes names that are not UTF-8 with
    `surrogateescape`, and such a name must not reach a failure message, the per-file report or the database
    as it is (a latin-1 `notes-caf\xe9.txt` becomes `notes-caf\\xe9.txt`). Names longer than a file system
    takes are refused with PathTooLong before anything is written.
    """
    if "\\" in name or "\x00" in name:
        raise ArchiveError("UnsafePath", f"{name!r}: backslash or NUL in member name")
    if name.startswith("/") or _DRIVE.match(name):
        raise ArchiveError("UnsafePath", f"{name!r}: absolute path")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ArchiveError("UnsafePath", f"{name!r}: '..' component")
    relpath = displayable("/".join(parts))
    _check_length(relpath)
    return relpath


def _check_length(relpath: str) -> None:
    longest = max(relpath.split("/"), key=lambda part: len(part.encode()))
    if len(longest.encode()) > MAX_NAME_BYTES:
        raise ArchiveError(
            "PathTooLong", f"{relpath[:80]}...: a name of {len(longest.encode())} bytes (at most {MAX_NAME_BYTES})"
        )
    if len(relpath.encode()) > MAX_PATH_BYTES:
        raise ArchiveError(
            "PathTooLong", f"{relpath[:80]}...: a path of {len(relpath.encode())} bytes (at most {MAX_PATH_BYTES})"
        )


def _check_rank(log: LogFile) -> LogFile:
    """A rank the series table can hold (service/limits.py), the same on SQLite and PostgreSQL."""
    if log.rank > MAX_RANK:
        raise ArchiveError("RankOutOfRange", f"{log.relpath[:120]}: rank {log.rank} is above {MAX_RANK}")
    return log


def _output_relpath(log: LogFile) -> str:
    return log.relpath.removesuffix(".gz")


def _write(out: _Output, budget: _Budget, relpath: str, raw: Any, count_total: bool) -> Path:
    """Stream one member to dest/relpath as plain text, undoing gzip when its bytes say gzip.

    `count_total` is False when the bytes were already metered on the way in (tar); gzip output is new
    uncompressed data, so it always counts towards the total and the ratio.
    """
    gzipped = raw.peek(2)[:2] == _GZIP_MAGIC
    count_total = count_total or gzipped
    member_bytes = 0

    def account(n: int) -> None:
        nonlocal member_bytes
        member_bytes += n
        budget.check_member_size(relpath, member_bytes)
        if count_total:
            budget.add(n)

    source = igzip.open(raw, "rb") if gzipped else raw
    consume = getattr(out, "consume", None)
    if consume is not None:  # streaming ingest (archive/stream.py): the member is read, never written
        consume(relpath, _Meter(source, account))
        return out.root / relpath
    with out.new_file(relpath) as handle:
        shutil.copyfileobj(_Meter(source, account), handle, CHUNK_BYTES)
    return out.root / relpath
