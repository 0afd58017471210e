"""Streaming ingest of an archive: members are read where they lie (tar stream, zip member, gzip) and handed
to a callback, never extracted to disk.

Same formats, member checks and limits as `extract_upload` (the same readers run, with an output that
hands each recognised member's metered, decompressed stream to a callback instead of a file). Two passes:
`scan_archive` reads everything once (every limit checked, gzip members verified) and lists the ranks and
their files; `read_members` then picks the members a job needs. A rank's statistics files must be parsed
oldest session first: when an archive holds them in another order, the early ones are spilled to a
temporary file until their turn (nothing is spilled in the common one-file-per-rank case).
"""

from __future__ import annotations

import contextlib
import io
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from isal import igzip

from fp8_policy.policy.parse.log_files import LogFile, classify_log_path, session_key
from fp8_policy.policy.parse.scalars_file import is_scalars_member
from fp8_policy.service.ingest.archive import _EXTRACTORS
from fp8_policy.service.ingest.archive.detect import _GZIP_MAGIC, _detect_format, open_source
from fp8_policy.service.ingest.archive.errors import _CORRUPT, ArchiveError
from fp8_policy.service.ingest.archive.limits import CHUNK_BYTES, ExtractLimits, _Budget, _Skipped
from fp8_policy.service.ingest.archive.output import _output_relpath, _safe_relpath

# a member's data: a tarfile member or an igzip stream over one, both buffered binary streams
MemberCallback = Callable[[str, io.BufferedIOBase], None]


@dataclass(slots=True)
class ArchiveScan:
    """The recognised members: `stats[rank]` in session order, as (member path, streamed name) pairs."""

    format: str
    stats: dict[int, list[tuple[str, str]]] = field(default_factory=dict)
    metadata: list[tuple[str, str]] = field(default_factory=list)
    skipped_members: int = 0
    skipped_samples: list[str] = field(default_factory=list)


class _Handover:
    """Stands in for the extractors' `_Output`: each member goes to `on_member`, nothing is written."""

    root = Path("/")

    def __init__(self, on_member: MemberCallback, takes: Callable[[str], bool] | None = None) -> None:
        self.on_member = on_member
        self.seen: set[str] = set()
        # members other than logs that are handed over too (the training scalars); None: logs only
        self.takes = takes

    def consume(self, relpath: str, stream: io.BufferedIOBase) -> None:
        if relpath in self.seen:
            raise ArchiveError("DuplicateMember", f"{relpath}: written twice")
        self.seen.add(relpath)
        self.on_member(relpath, stream)

    def remove_all(self) -> None:  # nothing was written
        pass


def _walk(
    src: IO[bytes],
    size: int,
    limits: ExtractLimits,
    hint: str | None,
    on_member: MemberCallback,
    takes: Callable[[str], bool] | None = None,
) -> tuple[str, list[LogFile], _Skipped]:
    if size == 0:
        raise ArchiveError("EmptyUpload", "the upload is empty")
    budget, skipped = _Budget(limits, size), _Skipped()
    try:
        fmt = _detect_format(src)
        files = _EXTRACTORS[fmt](src, _Handover(on_member, takes), budget, skipped, hint)  # type: ignore[arg-type]
    except _CORRUPT as exc:
        raise ArchiveError("CorruptArchive", f"{type(exc).__name__}: {exc}") from exc
    return fmt, [log for log, _path in files], skipped


class ChunkedReader:
    """`readinto` in reads of at most CHUNK_BYTES, straight into the caller's buffer. The parser asks for 16 MiB
    blocks, and tarfile's stream mode joins and re-slices its buffer on every read (CPython Lib/tarfile.py,
    _Stream.__read): reading an 833 MB member 16 MiB at a time took 1.7 s, 1 MiB at a time 0.25 s."""

    def __init__(self, raw: io.BufferedIOBase) -> None:
        self.raw = raw

    def readinto(self, view: memoryview) -> int:
        return self.raw.readinto(view[:CHUNK_BYTES])


def _drain(_relpath: str, stream: io.BufferedIOBase) -> None:
    while stream.read(CHUNK_BYTES):
        pass


def scan_archive(
    src: IO[bytes],
    size: int,
    limits: ExtractLimits,
    hint: str | None = None,
    on_metadata: MemberCallback | None = None,
    on_stats: MemberCallback | None = None,
    on_scalars: MemberCallback | None = None,
) -> ArchiveScan:
    """Read the whole upload once, checking every limit (ArchiveError as `extract_upload` raises it); members
    go to `on_metadata` / `on_stats` when given (under the name `ArchiveScan` lists them with), a training
    scalars member (policy/parse/scalars_file.py) to `on_scalars` under its own name (then not counted as skipped),
    and whatever a callback leaves unread is read to the end."""

    def on_member(relpath: str, stream: io.BufferedIOBase) -> None:
        log = classify_log_path(relpath)
        callback = on_scalars if log is None else on_metadata if log.kind == "metadata" else on_stats
        if callback is not None:
            callback(relpath, stream)
        if log is None:  # the training scalars: a damaged gzip of their own is their warning (service/ingest/
            with contextlib.suppress(*_CORRUPT):  # scalars.py); a damaged archive stream fails at its next member
                _drain(relpath, stream)
            return
        _drain(relpath, stream)

    takes = is_scalars_member if on_scalars is not None else None
    fmt, logs, skipped = _walk(src, size, limits, hint, on_member, takes)
    if not any(log.kind == "stats" for log in logs):
        detail = "no nvdlfw_inspect_statistics_logs/nvdlfw_inspect[_stamp]_globalrank-N.log in the upload"
        if logs:
            detail += f" ({len(logs)} metadata log(s) only)"
        if skipped.samples:
            detail += f"; skipped e.g. {', '.join(skipped.samples)}"
        raise ArchiveError("NoStatsFile", detail)
    scan = ArchiveScan(fmt, skipped_members=skipped.count, skipped_samples=list(skipped.samples))
    for log in sorted(logs, key=session_key):
        pair = (log.relpath, _streamed_name(log, fmt))
        if log.kind == "stats":
            scan.stats.setdefault(log.rank, []).append(pair)
        else:
            scan.metadata.append(pair)
    return scan


def read_members(
    src: IO[bytes],
    size: int,
    limits: ExtractLimits,
    hint: str | None,
    *,
    stats: list[str],
    on_stats: MemberCallback,
    spill_dir: Path,
) -> None:
    """Hand the named statistics members to `on_stats` in the given order; other members are skipped unread.
    Raises ArchiveError when a named member is missing."""
    pending = list(stats)
    wanted = set(stats)
    spilled: dict[str, Path] = {}
    work = Path(tempfile.mkdtemp(prefix="spill-", dir=spill_dir)) if len(stats) > 1 else None

    def next_spilled() -> None:
        while pending and pending[0] in spilled:
            relpath = pending.pop(0)
            path = spilled.pop(relpath)
            with open(path, "rb") as handle:
                on_stats(relpath, handle)
            path.unlink()

    def on_member(relpath: str, stream: io.BufferedIOBase) -> None:
        if relpath in wanted:
            if pending and pending[0] == relpath:
                pending.pop(0)
                on_stats(relpath, stream)
                next_spilled()
            else:  # a later session came first in the archive: keep it until its turn
                assert work is not None
                path = work / f"{len(spilled)}"
                with open(path, "wb") as handle:
                    shutil.copyfileobj(stream, handle, CHUNK_BYTES)
                spilled[relpath] = path

    try:
        fmt = _detect_format(src)
        if fmt in ("tar.gz", "tar"):
            _read_tar_members(src, fmt, wanted, on_member)
        else:
            _walk(src, size, limits, hint, on_member)
        if pending:
            raise ArchiveError("CorruptArchive", f"{pending[0]}: listed by the scan but not found in the archive")
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)


def _read_tar_members(src: IO[bytes], fmt: str, wanted: set[str], on_member: MemberCallback) -> None:
    """The wanted members of a tar(.gz) the plan job's scan already checked (paths, types, every limit).

    tarfile's seekable mode reads a member's data straight from the decompressor in large reads; its stream
    mode ("r|", which the scan needs to meter every byte) assembles reads from 10 KiB records, several times
    slower for the parser's 16 MiB blocks. The decompressor only ever seeks forward here.
    """
    with open_source(src) as handle:
        stream = igzip.open(handle, "rb") if fmt == "tar.gz" else handle
        try:
            with tarfile.open(fileobj=stream, mode="r:") as tar:
                for member in tar:
                    if not member.isfile():
                        continue
                    log = classify_log_path(_safe_relpath(member.name))
                    relpath = _output_relpath(log) if log is not None else None
                    if relpath not in wanted:
                        continue
                    raw = tar.extractfile(member)
                    assert isinstance(raw, io.BufferedReader)  # tarfile.ExFileObject, for a regular file
                    gzipped = raw.peek(2)[:2] == _GZIP_MAGIC
                    on_member(relpath, igzip.open(raw, "rb") if gzipped else raw)
        finally:
            if stream is not handle:
                stream.close()


def _streamed_name(log: LogFile, fmt: str) -> str:
    """The name a member reaches the callback under (archive readers strip `.gz`; a single log gets one)."""
    if fmt in ("log", "log.gz"):
        stamp = f"_{log.stamp}" if log.stamp else ""
        return f"rank_{log.rank}/nvdlfw_inspect_statistics_logs/nvdlfw_inspect{stamp}_globalrank-{log.rank}.log"
    return _output_relpath(log)
