"""The one member loop of the archive readers: name checks, type checks, which members are logs, size limits and
the metered write — the same for tar and zip, which differ only in how a member is listed, checked and opened."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from fp8_policy.policy.parse.log_files import LogFile, classify_log_path
from fp8_policy.service.ingest.archive.limits import _Budget, _Skipped
from fp8_policy.service.ingest.archive.output import _check_rank, _Output, _output_relpath, _safe_relpath, _write


@dataclass(frozen=True, slots=True)
class Member:
    """One archive member as the loop needs it; `check` raises ArchiveError for a type the service refuses."""

    name: str  # as stored in the archive
    is_dir: bool
    size: int  # declared uncompressed size
    check: Callable[[str], None]  # given the safe relative path
    open: Callable[[str], AbstractContextManager[IO[bytes]]]


def extract_members(
    members: Iterable[Member], out: _Output, budget: _Budget, skipped: _Skipped, *, count_total: bool
) -> list[tuple[LogFile, Path]]:
    """Write every log member under `out`; other regular files are only listed in `skipped`.

    `count_total`: whether the written bytes count towards the total extracted size (a zip's are only counted
    here; a tar stream meters every byte on the way in already)."""
    files: list[tuple[LogFile, Path]] = []
    for member in members:
        relpath = _safe_relpath(member.name)
        member.check(relpath)
        if member.is_dir:
            continue
        log = classify_log_path(relpath)
        if log is None:
            takes = getattr(out, "takes", None)  # streaming ingest: a member it also reads (the training scalars)
            if takes is not None and takes(relpath):
                budget.check_member_size(relpath, member.size)
                with member.open(relpath) as raw:
                    _write(out, budget, relpath, raw, count_total=count_total)
            else:
                skipped.add(relpath)
            continue
        _check_rank(log)
        budget.check_member_size(relpath, member.size)
        with member.open(relpath) as raw:
            files.append((log, _write(out, budget, _output_relpath(log), raw, count_total=count_total)))
    return files
