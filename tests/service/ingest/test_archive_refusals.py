"""Tests for service.ingest.archive: every refusal code (unsafe paths and member types, two members for one file,
empty, truncated or corrupt uploads, no statistics file) and the member, total and ratio limits.
"""

from __future__ import annotations

import gzip
import os
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from fp8_policy.service.ingest.archive import ArchiveError, ExtractLimits, extract_upload
from tests.service.ingest.archive_members import (
    META_0,
    META_TEXT,
    STATS,
    STATS_0,
    STATS_TEXT,
    _refuse,
    _special,
    _tar,
    _zip,
)


@pytest.mark.parametrize(
    "name",
    [
        "../evil.log",
        "../../evil.log",
        f"rank_0/../../../{STATS_0}",
        "C:/evil.log",
        "C:evil.log",
        "..\\..\\evil.log",
        "rank_0\\..\\..\\evil.log",
    ],
)
def test_tar_path_traversal_is_refused(tmp_path: Path, dest: Path, name: str) -> None:
    # A valid log comes first, so the refusal also has to undo a write.
    upload = _tar(tmp_path / "u.tar.gz", [(STATS_0, STATS_TEXT), (name, STATS_TEXT)])

    _refuse(upload, dest, "UnsafePath")

    assert not (tmp_path / "evil.log").exists()
    assert not (tmp_path / "out" / "evil.log").exists()


def test_tar_absolute_path_is_refused(tmp_path: Path, dest: Path) -> None:
    target = tmp_path / "abs" / STATS_0
    upload = _tar(tmp_path / "u.tar.gz", [(STATS_0, STATS_TEXT), (str(target), STATS_TEXT)])

    _refuse(upload, dest, "UnsafePath")

    assert not target.exists()


@pytest.mark.parametrize(
    "member",
    [
        _special(STATS_0, tarfile.SYMTYPE, "/etc/passwd"),
        _special("rank_0", tarfile.SYMTYPE, ".."),
        _special(STATS_0, tarfile.LNKTYPE, "/etc/passwd"),
        _special("dev/null", tarfile.CHRTYPE),
        _special("dev/sda", tarfile.BLKTYPE),
        _special("pipe", tarfile.FIFOTYPE),
    ],
    ids=["symlink", "dir-symlink", "hardlink", "chardev", "blockdev", "fifo"],
)
def test_tar_links_and_special_files_are_refused(tmp_path: Path, dest: Path, member: tarfile.TarInfo) -> None:
    upload = _tar(tmp_path / "u.tar.gz", [(META_0, META_TEXT), member, (STATS_0, STATS_TEXT)])

    _refuse(upload, dest, "UnsupportedMember")


@pytest.mark.parametrize("name", ["../evil.log", "/abs/evil.log", "C:/evil.log", "..\\evil.log"])
def test_zip_unsafe_paths_are_refused(tmp_path: Path, dest: Path, name: str) -> None:
    upload = _zip(tmp_path / "u.zip", [(STATS_0, STATS_TEXT), (name, STATS_TEXT)])

    _refuse(upload, dest, "UnsafePath")

    assert not (tmp_path / "out" / "evil.log").exists()


def test_zip_symlink_entry_is_refused(tmp_path: Path, dest: Path) -> None:
    link = zipfile.ZipInfo(f"rank_1/{STATS}/nvdlfw_inspect_globalrank-1.log")
    link.create_system = 3
    link.external_attr = 0o120777 << 16
    upload = _zip(tmp_path / "u.zip", [(STATS_0, STATS_TEXT), (link, b"/etc/passwd")])

    _refuse(upload, dest, "UnsupportedMember")


def test_planted_symlink_in_dest_is_not_followed(tmp_path: Path, dest: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    dest.mkdir(parents=True)
    (dest / "rank_0").symlink_to(outside)
    upload = _tar(tmp_path / "u.tar.gz", {STATS_0: STATS_TEXT})

    with pytest.raises(ArchiveError) as caught:
        extract_upload(upload, dest, ExtractLimits())

    assert caught.value.code == "UnsafePath"
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize(
    "members",
    [
        [(STATS_0, STATS_TEXT), (STATS_0, STATS_TEXT)],
        [(STATS_0, STATS_TEXT), (f"{STATS_0}.gz", gzip.compress(STATS_TEXT))],
    ],
    ids=["same-name", "log-and-log.gz"],
)
def test_two_members_for_one_file_are_refused(tmp_path: Path, dest: Path, members: list[tuple[str, bytes]]) -> None:
    upload = _tar(tmp_path / "u.tar.gz", members)

    _refuse(upload, dest, "DuplicateMember")


@pytest.mark.parametrize(
    "content",
    [b"", gzip.compress(b""), b"\n  \n\t\n"],
    ids=["empty", "gzip-of-nothing", "whitespace"],
)
def test_empty_upload(tmp_path: Path, dest: Path, content: bytes) -> None:
    upload = tmp_path / "upload.bin"
    upload.write_bytes(content)

    _refuse(upload, dest, "EmptyUpload")


@pytest.mark.parametrize(
    "content",
    [
        os.urandom(4096).replace(b"\x1f", b"\x00").replace(b"P", b"p"),
        b"\x89PNG\r\n\x1a\n" + b"\x00" * 600,
        b"BZh91AY&SY" + b"\x00" * 600,
        b"hello, this is a text file\n" + STATS_TEXT,
        gzip.compress(b"not a log at all\n"),
    ],
    ids=["random", "png", "bzip2", "text", "gzipped-text"],
)
def test_not_an_archive(tmp_path: Path, dest: Path, content: bytes) -> None:
    upload = tmp_path / "upload.bin"
    upload.write_bytes(content)

    _refuse(upload, dest, "NotAnArchive")


def test_truncated_tar_gz(tmp_path: Path, dest: Path) -> None:
    payload = os.urandom(256 * 1024)  # incompressible, so the cut lands inside the member data
    full = _tar(tmp_path / "full.tar.gz", {META_0: META_TEXT, STATS_0: STATS_TEXT + payload}).read_bytes()
    upload = tmp_path / "upload.tar.gz"
    upload.write_bytes(full[: len(full) // 2])
    (tmp_path / "full.tar.gz").unlink()

    _refuse(upload, dest, "CorruptArchive")


def test_truncated_plain_tar(tmp_path: Path, dest: Path) -> None:
    full = _tar(tmp_path / "full.tar", {STATS_0: STATS_TEXT * 1000}, mode="w").read_bytes()
    upload = tmp_path / "upload.tar"
    upload.write_bytes(full[:2048])
    (tmp_path / "full.tar").unlink()

    _refuse(upload, dest, "CorruptArchive")


def test_truncated_single_gzipped_log(tmp_path: Path, dest: Path) -> None:
    upload = tmp_path / "upload.log.gz"
    upload.write_bytes(gzip.compress(STATS_TEXT * 5000)[:-100])

    _refuse(upload, dest, "CorruptArchive")


def test_gzip_with_bad_crc(tmp_path: Path, dest: Path) -> None:
    data = bytearray(gzip.compress(STATS_TEXT * 10))
    data[-8] ^= 0xFF  # CRC32 of the trailer
    upload = tmp_path / "upload.log.gz"
    upload.write_bytes(bytes(data))

    _refuse(upload, dest, "CorruptArchive")


def test_truncated_zip(tmp_path: Path, dest: Path) -> None:
    full = _zip(tmp_path / "full.zip", {STATS_0: STATS_TEXT * 100}).read_bytes()
    upload = tmp_path / "upload.zip"
    upload.write_bytes(full[: len(full) - 30])
    (tmp_path / "full.zip").unlink()

    _refuse(upload, dest, "CorruptArchive")


def test_zip_with_bad_crc(tmp_path: Path, dest: Path) -> None:
    upload = tmp_path / "upload.zip"
    with zipfile.ZipFile(upload, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(META_0, META_TEXT)
        zf.writestr(STATS_0, STATS_TEXT)
    data = upload.read_bytes()
    at = data.index(STATS_TEXT)
    upload.write_bytes(data[:at] + b"X" + data[at + 1 :])  # same size, different bytes

    _refuse(upload, dest, "CorruptArchive")


@pytest.mark.parametrize(
    "build",
    [
        lambda p: _tar(p / "u.tar.gz", {META_0: META_TEXT, "README.md": b"x"}),
        lambda p: _tar(p / "u.tar.gz", {}),
        lambda p: _tar(p / "u.tar", {"notes.txt": b"x"}, mode="w"),
        lambda p: _zip(p / "u.zip", {META_0: META_TEXT}),
        lambda p: _zip(p / "u.zip", {}),
    ],
    ids=["metadata-only", "empty-tar-gz", "unrelated-tar", "metadata-only-zip", "empty-zip"],
)
def test_no_stats_file(tmp_path: Path, dest: Path, build: Any) -> None:
    _refuse(build(tmp_path), dest, "NoStatsFile")


@pytest.mark.parametrize("fmt", ["tar.gz", "zip"])
def test_too_many_members(tmp_path: Path, dest: Path, fmt: str) -> None:
    members = {STATS_0: STATS_TEXT, **{f"extra/{i}.txt": b"x" for i in range(5)}}
    upload = _tar(tmp_path / "u.tar.gz", members) if fmt == "tar.gz" else _zip(tmp_path / "u.zip", members)

    _refuse(upload, dest, "TooManyMembers", ExtractLimits(max_members=4))


def test_member_over_its_limit(tmp_path: Path, dest: Path) -> None:
    upload = _tar(tmp_path / "u.tar.gz", {META_0: META_TEXT, STATS_0: STATS_TEXT * 100})

    _refuse(upload, dest, "ArchiveTooLarge", ExtractLimits(max_member_bytes=len(STATS_TEXT) * 10))


def test_total_over_its_limit(tmp_path: Path, dest: Path) -> None:
    upload = _zip(tmp_path / "u.zip", {META_0: META_TEXT * 500, STATS_0: STATS_TEXT * 500})

    _refuse(upload, dest, "ArchiveTooLarge", ExtractLimits(max_total_bytes=len(META_TEXT) * 600))


def test_small_uploads_are_not_flagged_for_ratio(tmp_path: Path, dest: Path) -> None:
    upload = _tar(tmp_path / "u.tar.gz", {STATS_0: STATS_TEXT * 20_000})  # ~2.6 MB, ratio far above 1

    result = extract_upload(upload, dest, ExtractLimits(max_ratio=1.0))

    assert result.total_bytes == len(STATS_TEXT) * 20_000
