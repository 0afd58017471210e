"""Safe extraction of an uploaded log archive (or single log file) into a work directory.

Belongs here: format detection by magic bytes, streaming tar / tar.gz / zip / gzip extraction, member path and
type checks, size / ratio / member-count limits, and removing partial output on failure. Only members that
`policy.parse.log_files.classify_log_path` recognises are written, always as plain text (gzip is undone here, under
the same limits). Must not be here: parsing log lines, HTTP or database concerns (callers map `ArchiveError.code`).

This module holds the entry point, `extract_upload`, and the format -> reader table. The parts: `errors`
(codes, ArchiveError), `limits` (ExtractLimits, ExtractResult, byte and member accounting), `detect` (format
by content), `output` (member paths, writes under dest, clean-up), and the readers `tar`, `zips` and `single`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

# Re-exported: tests patch `archive.igzip.open`, which every reader here looks up through the igzip module.
from isal import igzip as igzip

from fp8_policy.policy.parse.log_files import LogFile
from fp8_policy.service.ingest.archive.detect import PEEK_BYTES, _detect_format
from fp8_policy.service.ingest.archive.errors import _CORRUPT, ERROR_CODES, ArchiveError
from fp8_policy.service.ingest.archive.limits import (
    CHUNK_BYTES,
    DEFAULT_LIMITS,
    MAX_SKIPPED_SAMPLES,
    ExtractLimits,
    ExtractResult,
    GiB,
    MiB,
    _Budget,
    _Skipped,
)
from fp8_policy.service.ingest.archive.output import _Output
from fp8_policy.service.ingest.archive.single import _extract_single
from fp8_policy.service.ingest.archive.tar import _extract_tar, _extract_tar_gz
from fp8_policy.service.ingest.archive.zips import _extract_zip

__all__ = [
    "CHUNK_BYTES",
    "DEFAULT_LIMITS",
    "ERROR_CODES",
    "MAX_SKIPPED_SAMPLES",
    "PEEK_BYTES",
    "ArchiveError",
    "ExtractLimits",
    "ExtractResult",
    "GiB",
    "MiB",
    "extract_upload",
]


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


_Extractor = Callable[[Path, _Output, _Budget, _Skipped, str | None], list[tuple[LogFile, Path]]]

_EXTRACTORS: dict[str, _Extractor] = {
    "tar.gz": _extract_tar_gz,
    "tar": _extract_tar,
    "zip": _extract_zip,
    "log.gz": _extract_single,  # _write sees the gzip magic and decompresses
    "log": _extract_single,
}
