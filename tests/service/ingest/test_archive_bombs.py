"""Tests for service.ingest.archive: decompression bombs (gzip, a gzipped member inside a zip, a bomb in a skipped
member) are stopped early by the ratio and total limits, a skipped member's bytes metered too.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fp8_policy.service.ingest import archive
from fp8_policy.service.ingest.archive import ArchiveError, ExtractLimits, extract_upload
from tests.service.ingest.archive_members import (
    STATS_0,
    MiB,
    _files_under,
    _refuse,
    _zip,
)


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
