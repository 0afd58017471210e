"""Tests for service.ingest.archive: formats, layouts, every refusal code, limits and cleanup on failure."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fp8_policy.policy.parse.log_files import LogFile
from fp8_policy.service.ingest import archive
from fp8_policy.service.ingest.archive import ArchiveError, ExtractLimits, ExtractResult, extract_upload
from tests.support.archives import tar_bytes

SHARED = Path(__file__).resolve().parents[3].parent / "shared"
ESM2_LOGS = SHARED / "fixtures" / "bionemo" / "dummy_logs_esm2"

STATS = "nvdlfw_inspect_statistics_logs"
META = "nvdlfw_inspect_logs"
STATS_0 = f"rank_0/{STATS}/nvdlfw_inspect_globalrank-0.log"
META_0 = f"rank_0/{META}/nvdlfw_inspect_globalrank-0.log"
STATS_TEXT = (
    b"2026-01-15 23:06:41,589 - INFO - model.layers.1.fc1_activation_underflows% \t\t\t\t "
    b"iteration=000000 \t\t\t\t value=21.4681\n"
)
META_TEXT = b"2026-01-15 23:06:31,201 - INFO - Assigned layer name: model\n"
MiB = 1024**2

Members = dict[str, bytes]


# --- helpers ------------------------------------------------------------------------------------------


def _tar(path: Path, members: Members | list[tarfile.TarInfo | tuple[str, bytes]], mode: str = "w:gz") -> Path:
    path.write_bytes(tar_bytes(members, mode))
    return path


def _special(name: str, type_: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = type_
    info.linkname = linkname
    return info


def _zip(path: Path, members: Members | list[tuple[zipfile.ZipInfo | str, bytes]]) -> Path:
    items = members.items() if isinstance(members, dict) else members
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in items:
            zf.writestr(name, data)
    return path


def _files_under(root: Path) -> set[Path]:
    return set(root.rglob("*")) if root.exists() else set()


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    # Two levels deep so that `../evil.log` and `../../evil.log` would both land inside tmp_path.
    return tmp_path / "out" / "work"


def _refuse(
    upload: Path, dest: Path, code: str, limits: ExtractLimits | None = None, hint: str | None = None
) -> ArchiveError:
    """Extraction fails with `code`, leaves dest empty and writes nothing anywhere else in tmp_path."""
    before = _files_under(upload.parent) - _files_under(dest)
    with pytest.raises(ArchiveError) as caught:
        extract_upload(upload, dest, limits or ExtractLimits(), filename_hint=hint)
    assert caught.value.code == code, caught.value.detail
    assert _files_under(dest) == set()
    assert _files_under(upload.parent) - {dest, dest.parent} == before - {dest, dest.parent}
    return caught.value


def _extracted(result: ExtractResult, dest: Path) -> dict[str, bytes]:
    return {path.relative_to(dest).as_posix(): path.read_bytes() for _, path in result.files}


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


# --- refusals: content --------------------------------------------------------------------------------


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


# --- refusals: limits ---------------------------------------------------------------------------------


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


class _ZeroReader(io.RawIOBase):
    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), self.left)
        buffer[:n] = b"\0" * n
        self.left -= n
        return n


BOMB_BYTES = 200 * 1000 * 1000


@pytest.fixture(scope="module")
def bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """200 MB of zeros in a tar.gz (about 200 KB on disk), named like a stats log."""
    path = tmp_path_factory.mktemp("bomb") / "bomb.tar.gz"
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        info = tarfile.TarInfo(STATS_0)
        info.size = BOMB_BYTES
        tar.addfile(info, io.BufferedReader(_ZeroReader(BOMB_BYTES), 4 * MiB))
    return path


@pytest.fixture
def gunzipped(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts every byte the extractor decompresses through isal."""
    counted = [0]
    real_open = archive.igzip.open

    class Counting:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def read(self, n: int = -1) -> bytes:
            data = self.inner.read(n)
            counted[0] += len(data)
            return data

        def __enter__(self) -> Counting:
            return self

        def __exit__(self, *exc: object) -> None:
            self.inner.close()

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    monkeypatch.setattr(archive.igzip, "open", lambda *a, **k: Counting(real_open(*a, **k)))
    yield counted


def test_gzip_bomb_is_stopped_by_ratio_early(bomb: Path, tmp_path: Path, gunzipped: list[int]) -> None:
    dest = tmp_path / "work"
    limits = ExtractLimits(max_ratio=20.0, ratio_floor_bytes=1 * MiB)

    with pytest.raises(ArchiveError) as caught:
        extract_upload(bomb, dest, limits)

    assert caught.value.code == "CompressionRatioExceeded"
    assert _files_under(dest) == set()
    assert gunzipped[0] < 32 * MiB  # stopped near 20 x 200 KB, not after 200 MB


def test_gzip_bomb_is_stopped_by_total_early(bomb: Path, tmp_path: Path, gunzipped: list[int]) -> None:
    dest = tmp_path / "work"

    with pytest.raises(ArchiveError) as caught:
        extract_upload(bomb, dest, ExtractLimits(max_total_bytes=4 * MiB))

    assert caught.value.code == "ArchiveTooLarge"
    assert _files_under(dest) == set()
    assert gunzipped[0] < 8 * MiB


def test_bomb_in_a_skipped_member_is_metered_too(tmp_path: Path, dest: Path) -> None:
    upload = tmp_path / "u.tar.gz"
    with tarfile.open(upload, "w:gz", compresslevel=1) as tar:
        tar.addfile(tarfile.TarInfo(STATS_0), io.BytesIO())
        info = tarfile.TarInfo("junk.bin")
        info.size = 50 * MiB
        tar.addfile(info, io.BufferedReader(_ZeroReader(info.size), 4 * MiB))

    _refuse(upload, dest, "CompressionRatioExceeded", ExtractLimits(max_ratio=20.0, ratio_floor_bytes=MiB))


def test_gzipped_member_bomb_inside_zip(tmp_path: Path, dest: Path) -> None:
    inner = tmp_path / "inner.gz"
    with gzip.open(inner, "wb", compresslevel=1) as gz:
        for _ in range(50):
            gz.write(b"\0" * MiB)
    upload = _zip(tmp_path / "u.zip", {f"{STATS_0}.gz": inner.read_bytes()})
    inner.unlink()

    _refuse(upload, dest, "CompressionRatioExceeded", ExtractLimits(max_ratio=20.0, ratio_floor_bytes=MiB))
