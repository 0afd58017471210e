"""The tar and tar.gz readers: one sequential pass, member type checks, every byte metered on the way in."""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import IO

from isal import igzip

from fp8_policy.policy.log_files import LogFile, classify_log_path
from fp8_policy.policy.safe_text import displayable
from fp8_policy.service.ingest.archive.detect import open_source
from fp8_policy.service.ingest.archive.errors import ArchiveError
from fp8_policy.service.ingest.archive.limits import _Budget, _Meter, _Skipped
from fp8_policy.service.ingest.archive.output import _check_rank, _Output, _output_relpath, _safe_relpath, _write


def _extract_tar_gz(
    src: Path, out: _Output, budget: _Budget, skipped: _Skipped, hint: str | None
) -> list[tuple[LogFile, Path]]:
    with open_source(src) as handle, igzip.open(handle, "rb") as gz:
        return _extract_tar_stream(gz, out, budget, skipped)


def _extract_tar(
    src: Path, out: _Output, budget: _Budget, skipped: _Skipped, hint: str | None
) -> list[tuple[LogFile, Path]]:
    with open_source(src) as handle:
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
            if log is not None:
                _check_rank(log)
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
        raise ArchiveError("UnsupportedMember", f"{relpath}: {kind} to '{displayable(member.linkname)}'")
    if member.isdev() or member.issparse() or not (member.isfile() or member.isdir()):
        raise ArchiveError("UnsupportedMember", f"{relpath}: not a regular file or directory")
    if member.isfile() and not relpath:
        raise ArchiveError("UnsafePath", f"{member.name!r}: file without a name")
