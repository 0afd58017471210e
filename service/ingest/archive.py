"""Safe extraction of an uploaded log archive (or single log file) into a work directory.

Belongs here: format detection by magic bytes, streaming tar / tar.gz / zip / gzip extraction, member path and
type checks, size / ratio / member-count limits, and removing partial output on failure. Only members that
`policy.log_files.classify_log_path` recognises are written, always as plain text (gzip is undone here, under
the same limits). Must not be here: parsing log lines, HTTP or database concerns (callers map `ArchiveError.code`).
"""

from __future__ import annotations

import re
import shutil
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from isal import igzip, isal_zlib

from policy.log_files import LogFile, classify_log_path, single_file_log

MiB = 1024**2
GiB = 1024**3
CHUNK_BYTES = 1 * MiB
MAX_SKIPPED_SAMPLES = 5
PEEK_BYTES = 64 * 1024

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
    }
)

_GZIP_MAGIC = b"\x1f\x8b"
_ZIP_MAGIC = b"PK\x03\x04"
_ZIP_EMPTY_MAGIC = b"PK\x05\x06"
_TAR_MAGIC = b"ustar"  # POSIX and GNU tar headers, at offset 257
_TAR_MAGIC_OFFSET = 257
_UTF8_BOM = b"\xef\xbb\xbf"
_LOG_LINE = re.compile(rb"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3} - [A-Z]+ - ")
_DRIVE = re.compile(r"^[A-Za-z]:")

# Everything a damaged archive can raise while being read. OSError in general is not here: a full disk is
# not the uploader's fault. BadGzipFile is the stdlib class, which isal re-exports.
_CORRUPT: tuple[type[BaseException], ...] = (
    EOFError,
    tarfile.TarError,
    zipfile.BadZipFile,
    igzip.BadGzipFile,
    isal_zlib.error,
    zlib.error,
    UnicodeDecodeError,
)


class ArchiveError(Exception):
    """An upload that is refused; `code` is one of ERROR_CODES and stable, `detail` is for humans."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


@dataclass(frozen=True, slots=True)
class ExtractLimits:
    """Limits checked while streaming, so a bomb is stopped at the limit, not after it is written."""

    max_total_bytes: int = 8 * GiB  # uncompressed bytes read from the archive stream, plus inner gzip output
    max_ratio: float = 250.0  # uncompressed total / upload size on disk
    ratio_floor_bytes: int = 64 * MiB  # the ratio applies only past this total, so small files are not flagged
    max_members: int = 10_000  # every member, directories and skipped files included
    max_member_bytes: int = 4 * GiB  # one written file, uncompressed


DEFAULT_LIMITS = ExtractLimits()


@dataclass(frozen=True, slots=True)
class ExtractResult:
    """What was written: files in archive order, with the LogFile of the member name and the path on disk."""

    files: list[tuple[LogFile, Path]]
    total_bytes: int  # bytes written under dest
    skipped_members: int  # regular files not recognised as nvdlfw_inspect logs
    skipped_samples: tuple[str, ...]  # the first few of them
    format: str  # tar.gz | tar | zip | log.gz | log


@dataclass(slots=True)
class _Skipped:
    count: int = 0
    samples: list[str] = field(default_factory=list)

    def add(self, name: str) -> None:
        self.count += 1
        if len(self.samples) < MAX_SKIPPED_SAMPLES:
            self.samples.append(name[:200])


class _Budget:
    """Counts uncompressed bytes and members against the limits; raises the moment one is passed."""

    def __init__(self, limits: ExtractLimits, upload_bytes: int) -> None:
        self.limits = limits
        self.upload_bytes = upload_bytes
        self.total = 0
        self.members = 0

    def add(self, n: int) -> None:
        self.total += n
        if self.total > self.limits.max_total_bytes:
            raise ArchiveError(
                "ArchiveTooLarge", f"more than {self.limits.max_total_bytes} bytes uncompressed"
            )
        ratio = self.total / self.upload_bytes
        if self.total > self.limits.ratio_floor_bytes and ratio > self.limits.max_ratio:
            raise ArchiveError(
                "CompressionRatioExceeded",
                f"{self.total} bytes from a {self.upload_bytes}-byte upload "
                f"(ratio above {self.limits.max_ratio:g})",
            )

    def count_members(self, n: int = 1) -> None:
        self.members += n
        if self.members > self.limits.max_members:
            raise ArchiveError("TooManyMembers", f"more than {self.limits.max_members} members")

    def check_member_size(self, name: str, size: int) -> None:
        if size > self.limits.max_member_bytes:
            raise ArchiveError(
                "ArchiveTooLarge", f"{name}: more than {self.limits.max_member_bytes} bytes"
            )


class _Meter:
    """A read-only stream wrapper that reports every chunk it returns (never trusts declared sizes)."""

    def __init__(self, raw: IO[bytes], on_bytes: Callable[[int], None]) -> None:
        self.raw = raw
        self.on_bytes = on_bytes

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0:
            return b"".join(iter(lambda: self.read(CHUNK_BYTES), b""))
        data = self.raw.read(n)
        self.on_bytes(len(data))
        return data


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
            handle = open(target, "xb")  # O_EXCL: never overwrites, never follows a planted symlink
        except (FileExistsError, IsADirectoryError):
            raise ArchiveError("DuplicateMember", f"{relpath}: written twice") from None
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
            path.mkdir()
            self.created.append(path)

    def remove_all(self) -> None:
        for path in reversed(self.created):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        self.created.clear()


def extract_upload(
    src: Path,
    dest: Path,
    limits: ExtractLimits = DEFAULT_LIMITS,
    filename_hint: str | None = None,
) -> ExtractResult:
    """Extract the recognised logs of the upload at `src` under `dest` (created if missing).

    Accepts tar.gz, tar, zip, a gzipped log and a plain-text log, told apart by content, not by name.
    A single log (plain or gzipped) becomes the rank-0 statistics file, or rank R when `filename_hint`
    is an nvdlfw_inspect name. Raises ArchiveError; on any failure everything written so far is removed.
    """
    dest.mkdir(parents=True, exist_ok=True)
    out = _Output(dest)
    try:
        return _extract(src, out, limits, filename_hint)
    except BaseException:
        out.remove_all()
        raise


def _extract(src: Path, out: _Output, limits: ExtractLimits, hint: str | None) -> ExtractResult:
    upload_bytes = src.stat().st_size
    if upload_bytes == 0:
        raise ArchiveError("EmptyUpload", "the upload is empty")
    budget = _Budget(limits, upload_bytes)
    skipped = _Skipped()
    try:
        fmt = _detect_format(src)
        files = _EXTRACTORS[fmt](src, out, budget, skipped, hint)
    except _CORRUPT as exc:
        raise ArchiveError("CorruptArchive", f"{type(exc).__name__}: {exc}") from exc
    if not any(log.kind == "stats" for log, _ in files):
        raise ArchiveError("NoStatsFile", _no_stats_detail(files, skipped))
    written = sum(path.stat().st_size for _, path in files)
    return ExtractResult(files, written, skipped.count, tuple(skipped.samples), fmt)


def _no_stats_detail(files: list[tuple[LogFile, Path]], skipped: _Skipped) -> str:
    detail = "no nvdlfw_inspect_statistics_logs/nvdlfw_inspect[_stamp]_globalrank-N.log in the upload"
    if files:
        detail += f" ({len(files)} metadata log(s) only)"
    if skipped.samples:
        detail += f"; skipped e.g. {', '.join(skipped.samples)}"
    return detail


# --- format detection -----------------------------------------------------------------------------------


def _detect_format(src: Path) -> str:
    with open(src, "rb") as handle:
        head = _read_up_to(handle, PEEK_BYTES)
    if head.startswith(_GZIP_MAGIC):
        with igzip.open(src, "rb") as gz:
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


# --- member paths and writing -----------------------------------------------------------------------------


def _safe_relpath(name: str) -> str:
    """Normalise a member name to `a/b/c` ("" for the archive root), refusing anything that could escape."""
    if "\\" in name or "\x00" in name:
        raise ArchiveError("UnsafePath", f"{name!r}: backslash or NUL in member name")
    if name.startswith("/") or _DRIVE.match(name):
        raise ArchiveError("UnsafePath", f"{name!r}: absolute path")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ArchiveError("UnsafePath", f"{name!r}: '..' component")
    return "/".join(parts)


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
    with out.new_file(relpath) as handle:
        shutil.copyfileobj(_Meter(source, account), handle, CHUNK_BYTES)
    return out.root / relpath


# --- extractors -------------------------------------------------------------------------------------------


def _extract_tar_gz(
    src: Path, out: _Output, budget: _Budget, skipped: _Skipped, hint: str | None
) -> list[tuple[LogFile, Path]]:
    with igzip.open(src, "rb") as gz:
        return _extract_tar_stream(gz, out, budget, skipped)


def _extract_tar(
    src: Path, out: _Output, budget: _Budget, skipped: _Skipped, hint: str | None
) -> list[tuple[LogFile, Path]]:
    with open(src, "rb") as handle:
        return _extract_tar_stream(handle, out, budget, skipped)


def _extract_tar_stream(
    stream: IO[bytes], out: _Output, budget: _Budget, skipped: _Skipped
) -> list[tuple[LogFile, Path]]:
    """Read the tar sequentially ("r|"): every byte, skipped members' too, is metered on the way in."""
    files: list[tuple[LogFile, Path]] = []
    with tarfile.open(fileobj=_Meter(stream, budget.add), mode="r|") as tar:  # type: ignore[call-overload]
        for member in tar:
            budget.count_members()
            relpath = _safe_relpath(member.name)
            _check_tar_member(member, relpath)
            if member.isdir():
                continue
            log = classify_log_path(relpath)
            if log is None:
                skipped.add(relpath)
                continue
            budget.check_member_size(relpath, member.size)
            raw = tar.extractfile(member)
            files.append((log, _write(out, budget, _output_relpath(log), raw, count_total=False)))
    return files


def _check_tar_member(member: tarfile.TarInfo, relpath: str) -> None:
    if member.issym() or member.islnk():
        kind = "symlink" if member.issym() else "hard link"
        raise ArchiveError("UnsupportedMember", f"{relpath}: {kind} to {member.linkname!r}")
    if member.isdev() or member.issparse() or not (member.isfile() or member.isdir()):
        raise ArchiveError("UnsupportedMember", f"{relpath}: not a regular file or directory")
    if member.isfile() and not relpath:
        raise ArchiveError("UnsafePath", f"{member.name!r}: file without a name")


def _extract_zip(
    src: Path, out: _Output, budget: _Budget, skipped: _Skipped, hint: str | None
) -> list[tuple[LogFile, Path]]:
    """Members are opened one at a time; skipped members are never decompressed."""
    files: list[tuple[LogFile, Path]] = []
    with zipfile.ZipFile(src) as archive:
        infos = archive.infolist()
        budget.count_members(len(infos))  # the central directory is read already: refuse before any write
        for info in infos:
            relpath = _safe_relpath(info.filename)
            _check_zip_member(info, relpath)
            if info.is_dir():
                continue
            log = classify_log_path(relpath)
            if log is None:
                skipped.add(relpath)
                continue
            budget.check_member_size(relpath, info.file_size)
            with _open_zip_member(archive, info, relpath) as raw:
                files.append((log, _write(out, budget, _output_relpath(log), raw, count_total=True)))
    return files


def _check_zip_member(info: zipfile.ZipInfo, relpath: str) -> None:
    file_type = stat.S_IFMT(info.external_attr >> 16)
    if file_type == stat.S_IFLNK:
        raise ArchiveError("UnsupportedMember", f"{relpath}: symlink")
    if file_type not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise ArchiveError("UnsupportedMember", f"{relpath}: not a regular file or directory")
    if info.flag_bits & 0x1:
        raise ArchiveError("UnsupportedMember", f"{relpath}: encrypted")
    if not info.is_dir() and not relpath:
        raise ArchiveError("UnsafePath", f"{info.filename!r}: file without a name")


def _open_zip_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, relpath: str) -> IO[bytes]:
    try:
        return archive.open(info)
    except NotImplementedError as exc:  # compression method zipfile cannot read
        raise ArchiveError("UnsupportedMember", f"{relpath}: {exc}") from exc


def _extract_single(
    src: Path, out: _Output, budget: _Budget, skipped: _Skipped, hint: str | None
) -> list[tuple[LogFile, Path]]:
    """A bare log is the statistics file; it is written under a name built from its rank, not the client's."""
    budget.count_members()
    log = single_file_log(hint)
    stamp = f"_{log.stamp}" if log.stamp else ""
    relpath = (
        f"rank_{log.rank}/nvdlfw_inspect_statistics_logs/nvdlfw_inspect{stamp}_globalrank-{log.rank}.log"
    )
    with open(src, "rb", buffering=CHUNK_BYTES) as raw:
        return [(log, _write(out, budget, relpath, raw, count_total=True))]


_Extractor = Callable[[Path, _Output, _Budget, _Skipped, str | None], list[tuple[LogFile, Path]]]

_EXTRACTORS: dict[str, _Extractor] = {
    "tar.gz": _extract_tar_gz,
    "tar": _extract_tar,
    "zip": _extract_zip,
    "log.gz": _extract_single,  # _write sees the gzip magic and decompresses
    "log": _extract_single,
}
