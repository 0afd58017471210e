"""Tests for service.ingest.archive: formats, layouts and cleanup on failure (refusals and limits:
test_archive_refusals.py; decompression bombs: test_archive_bombs.py)."""

from __future__ import annotations

import gzip
import tarfile
from pathlib import Path

import pytest

from fp8_policy.policy.parse.log_files import LogFile
from fp8_policy.service.ingest.archive import ArchiveError, ExtractLimits, extract_upload
from tests.service.ingest.archive_members import (
    ESM2_LOGS,
    META,
    META_0,
    META_TEXT,
    STATS,
    STATS_0,
    STATS_TEXT,
    _extracted,
    _files_under,
    _special,
    _tar,
    _zip,
)

# --- helpers ------------------------------------------------------------------------------------------


# --- accepted uploads ---------------------------------------------------------------------------------


def test_tar_gz_with_rank_folders(tmp_path: Path, dest: Path) -> None:
    upload = _tar(
        tmp_path / "logs.tar.gz",
        {
            STATS_0: STATS_TEXT,
            META_0: META_TEXT,
            f"rank_1/{STATS}/nvdlfw_inspect_globalrank-1.log": STATS_TEXT * 2,
        },
    )

    result = extract_upload(upload, dest, ExtractLimits())

    assert result.format == "tar.gz"
    assert [log for log, _ in result.files] == [
        LogFile("stats", 0, None, STATS_0),
        LogFile("metadata", 0, None, META_0),
        LogFile("stats", 1, None, f"rank_1/{STATS}/nvdlfw_inspect_globalrank-1.log"),
    ]
    assert _extracted(result, dest) == {
        STATS_0: STATS_TEXT,
        META_0: META_TEXT,
        f"rank_1/{STATS}/nvdlfw_inspect_globalrank-1.log": STATS_TEXT * 2,
    }
    assert result.total_bytes == 3 * len(STATS_TEXT) + len(META_TEXT)
    assert result.skipped_members == 0


def test_plain_tar_without_rank_folders(tmp_path: Path, dest: Path) -> None:
    members = {
        f"{STATS}/nvdlfw_inspect_globalrank-0.log": STATS_TEXT,
        f"{STATS}/nvdlfw_inspect_globalrank-1.log": STATS_TEXT,
        f"{META}/nvdlfw_inspect_globalrank-1.log": META_TEXT,
    }
    upload = _tar(tmp_path / "logs.tar", members, mode="w")

    result = extract_upload(upload, dest, ExtractLimits())

    assert result.format == "tar"
    assert [(log.kind, log.rank) for log, _ in result.files] == [("stats", 0), ("stats", 1), ("metadata", 1)]
    assert _extracted(result, dest) == members


def test_nested_top_folder_and_directory_members(tmp_path: Path, dest: Path) -> None:
    upload = tmp_path / "run1.tar.gz"
    source = tmp_path / "src" / "run1"
    (source / "rank_0" / STATS).mkdir(parents=True)
    (source / "rank_0" / STATS / "nvdlfw_inspect_globalrank-0.log").write_bytes(STATS_TEXT)
    with tarfile.open(upload, "w:gz") as tar:
        tar.add(source, arcname="run1")  # includes directory members

    result = extract_upload(upload, dest, ExtractLimits())

    assert [log for log, _ in result.files] == [LogFile("stats", 0, None, f"run1/{STATS_0}")]
    assert (dest / "run1" / STATS_0).read_bytes() == STATS_TEXT


def test_dot_prefixed_member_names(tmp_path: Path, dest: Path) -> None:
    upload = _tar(tmp_path / "u.tar.gz", [_special(".", tarfile.DIRTYPE), (f"./{STATS_0}", STATS_TEXT)])

    result = extract_upload(upload, dest, ExtractLimits())

    assert [log.relpath for log, _ in result.files] == [STATS_0]
    assert (dest / STATS_0).read_bytes() == STATS_TEXT


def test_timestamped_names_and_disagreeing_rank_folder(tmp_path: Path, dest: Path) -> None:
    stamped = f"rank_0/{STATS}/nvdlfw_inspect_20260115_230641_globalrank-0.log"
    mismatched = f"rank_0/{STATS}/nvdlfw_inspect_globalrank-4.log"
    upload = _tar(tmp_path / "u.tar.gz", {stamped: STATS_TEXT, mismatched: STATS_TEXT})

    result = extract_upload(upload, dest, ExtractLimits())

    assert [log for log, _ in result.files] == [
        LogFile("stats", 0, "20260115_230641", stamped),
        LogFile("stats", 4, None, mismatched),
    ]


def test_zip_archive(tmp_path: Path, dest: Path) -> None:
    upload = _zip(tmp_path / "logs.zip", {"run/rank_0/": b"", f"run/{STATS_0}": STATS_TEXT, f"run/{META_0}": META_TEXT})

    result = extract_upload(upload, dest, ExtractLimits())

    assert result.format == "zip"
    assert _extracted(result, dest) == {f"run/{STATS_0}": STATS_TEXT, f"run/{META_0}": META_TEXT}


def test_gzipped_members_are_written_decompressed(tmp_path: Path, dest: Path) -> None:
    upload = _tar(tmp_path / "u.tar", {f"{STATS_0}.gz": gzip.compress(STATS_TEXT)}, mode="w")

    result = extract_upload(upload, dest, ExtractLimits())

    assert [log.relpath for log, _ in result.files] == [f"{STATS_0}.gz"]
    assert _extracted(result, dest) == {STATS_0: STATS_TEXT}


def test_gzip_is_recognised_by_content_not_name(tmp_path: Path, dest: Path) -> None:
    upload = _zip(tmp_path / "u.zip", {STATS_0: gzip.compress(STATS_TEXT)})

    result = extract_upload(upload, dest, ExtractLimits())

    assert _extracted(result, dest) == {STATS_0: STATS_TEXT}


def test_unrelated_members_are_skipped_and_counted(tmp_path: Path, dest: Path) -> None:
    upload = _tar(
        tmp_path / "u.tar.gz",
        {
            "README.txt": b"hello",
            STATS_0: STATS_TEXT,
            "tensor_dumps/rank_0/iter_000010/fc1_activation.pt": b"\x80\x02",
            f"__MACOSX/rank_0/{STATS}/._nvdlfw_inspect_globalrank-0.log": b"\x00\x05",
        },
    )

    result = extract_upload(upload, dest, ExtractLimits())

    assert result.skipped_members == 3
    assert result.skipped_samples == (
        "README.txt",
        "tensor_dumps/rank_0/iter_000010/fc1_activation.pt",
        f"__MACOSX/rank_0/{STATS}/._nvdlfw_inspect_globalrank-0.log",
    )
    assert _files_under(dest) == {dest / "rank_0", dest / "rank_0" / STATS, dest / STATS_0}


@pytest.mark.parametrize(
    ("hint", "expected"),
    [
        ("run.log", LogFile("stats", 0, None, "run.log")),
        (None, LogFile("stats", 0, None, "upload.log")),
        ("nvdlfw_inspect_globalrank-3.log", LogFile("stats", 3, None, "nvdlfw_inspect_globalrank-3.log")),
    ],
)
def test_single_plain_log(tmp_path: Path, dest: Path, hint: str | None, expected: LogFile) -> None:
    upload = tmp_path / "upload.bin"
    upload.write_bytes(b"\n" + STATS_TEXT * 3)

    result = extract_upload(upload, dest, ExtractLimits(), filename_hint=hint)

    assert result.format == "log"
    [(log, path)] = result.files
    assert log == expected
    assert path == dest / f"rank_{log.rank}" / STATS / f"nvdlfw_inspect_globalrank-{log.rank}.log"
    assert path.read_bytes() == b"\n" + STATS_TEXT * 3


def test_single_gzipped_log_with_timestamped_hint(tmp_path: Path, dest: Path) -> None:
    upload = tmp_path / "upload.bin"
    upload.write_bytes(gzip.compress(STATS_TEXT * 3))
    hint = "nvdlfw_inspect_20260115_230641_globalrank-2.log.gz"

    result = extract_upload(upload, dest, ExtractLimits(), filename_hint=hint)

    assert result.format == "log.gz"
    [(log, path)] = result.files
    assert log == LogFile("stats", 2, "20260115_230641", hint)
    assert path == dest / "rank_2" / STATS / "nvdlfw_inspect_20260115_230641_globalrank-2.log"
    assert path.read_bytes() == STATS_TEXT * 3


def test_hostile_single_file_hint_is_not_used_as_a_path(tmp_path: Path, dest: Path) -> None:
    upload = tmp_path / "upload.bin"
    upload.write_bytes(STATS_TEXT)

    result = extract_upload(upload, dest, ExtractLimits(), filename_hint="../../evil.log")

    assert result.files[0][1] == dest / STATS_0
    assert not (tmp_path / "evil.log").exists()


def test_real_bionemo_esm2_fixture(tmp_path: Path, dest: Path) -> None:
    upload = tmp_path / "esm2.tar.gz"
    with tarfile.open(upload, "w:gz") as tar:
        tar.add(ESM2_LOGS, arcname=ESM2_LOGS.name)

    result = extract_upload(upload, dest, ExtractLimits())

    logs = sorted((log.kind, log.rank) for log, _ in result.files)
    assert logs == [("metadata", 0), ("stats", 0)]
    for log, path in result.files:
        original = ESM2_LOGS / log.relpath.removeprefix(f"{ESM2_LOGS.name}/")
        assert path.read_bytes() == original.read_bytes()


def test_existing_content_of_dest_survives_a_failure(tmp_path: Path, dest: Path) -> None:
    dest.mkdir(parents=True)
    (dest / "keep.txt").write_text("mine")
    upload = _tar(tmp_path / "u.tar.gz", {STATS_0: STATS_TEXT, "../evil.log": b"x"})

    with pytest.raises(ArchiveError):
        extract_upload(upload, dest, ExtractLimits())

    assert _files_under(dest) == {dest / "keep.txt"}


# --- refusals: paths and member types -----------------------------------------------------------------


# --- refusals: content --------------------------------------------------------------------------------


# --- refusals: limits ---------------------------------------------------------------------------------
