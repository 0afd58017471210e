"""The zip reader: member count checked from the central directory, type and encryption checks per member."""

from __future__ import annotations

import stat
import zipfile
from functools import partial
from pathlib import Path
from typing import IO

from fp8_policy.policy.parse.log_files import LogFile
from fp8_policy.service.ingest.archive.detect import open_source
from fp8_policy.service.ingest.archive.errors import ArchiveError
from fp8_policy.service.ingest.archive.limits import _Budget, _Skipped
from fp8_policy.service.ingest.archive.members import Member, extract_members
from fp8_policy.service.ingest.archive.output import _Output


def _extract_zip(
    src: Path, out: _Output, budget: _Budget, skipped: _Skipped, hint: str | None
) -> list[tuple[LogFile, Path]]:
    """Members are opened one at a time; skipped members are never decompressed."""
    with open_source(src) as handle, zipfile.ZipFile(handle) as archive:
        infos = archive.infolist()
        budget.count_members(len(infos))  # the central directory is read already: refuse before any write
        members = (
            Member(
                info.filename,
                info.is_dir(),
                info.file_size,
                partial(_check_zip_member, info),
                partial(_open_zip_member, archive, info),
            )
            for info in infos
        )
        return extract_members(members, out, budget, skipped, count_total=True)


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
    if info.header_offset < 0:  # a central directory that points before the file: zipfile would seek to it
        raise ArchiveError("CorruptArchive", f"{relpath}: member offset {info.header_offset} is before the archive")
    try:
        return archive.open(info)
    except NotImplementedError as exc:  # compression method zipfile cannot read
        raise ArchiveError("UnsupportedMember", f"{relpath}: {exc}") from exc
