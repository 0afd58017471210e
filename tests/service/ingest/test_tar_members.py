"""Tar members read straight into the reader's buffer (service/ingest/archive/tar.py `_Forward`, `_MemberData`):
every header format tarfile writes, members of any size between skipped ones, odd read sizes, and the forward-only
rule of stream mode."""

from __future__ import annotations

import gzip
import io
import tarfile

import pytest
from isal import igzip

from fp8_policy.service.ingest.archive import ExtractLimits
from fp8_policy.service.ingest.archive.limits import _Meter
from fp8_policy.service.ingest.archive.stream import scan_archive
from fp8_policy.service.ingest.archive.tar import _Forward, _open_tar_member

LIMITS = ExtractLimits(max_total_bytes=64 * 1024**2, max_ratio=10_000, ratio_floor_bytes=1024**2, max_members=100)
LONG = "run/" + "a" * 120 + "/rank_0/nvdlfw_inspect_statistics_logs"  # a path over the ustar 100-byte field


def _line(k: int) -> bytes:
    return (
        f"2026-01-01 00:00:00,000 - INFO - model.l{k}_gradient_underflows% \t iteration={k:06d} \t value=0.5\n".encode()
    )


def _members() -> dict[str, bytes]:
    stats = b"".join(_line(k) for k in range(3001))  # not a multiple of 512 bytes
    return {
        "run/notes.txt": b"x" * 777,  # skipped: read past, metered
        f"{LONG}/nvdlfw_inspect_globalrank-0.log": stats,
        "run/rank_1/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-1.log.gz": gzip.compress(stats[:5000]),
        "run/empty.bin": b"",
    }


def _tar_gz(fmt: int) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=fmt) as tar:
        for name, data in _members().items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue())


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT])  # ustar: prefix
def test_members_read_in_any_piece_size_are_the_bytes_written(fmt: int) -> None:
    read: dict[str, bytes] = {}

    def on_stats(name: str, stream: io.BufferedIOBase) -> None:
        out, piece = bytearray(), memoryview(bytearray(4099))  # odd reads across the member's 512-byte padding
        while n := stream.readinto(piece):
            out += piece[:n]
        read[name] = bytes(out)

    data = _tar_gz(fmt)
    scan = scan_archive(io.BytesIO(data), len(data), LIMITS, on_stats=on_stats)

    members = _members()
    assert read[f"{LONG}/nvdlfw_inspect_globalrank-0.log"] == members[f"{LONG}/nvdlfw_inspect_globalrank-0.log"]
    gz_name = "run/rank_1/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-1.log"
    assert read[gz_name] == gzip.decompress(members[gz_name + ".gz"])
    assert scan.skipped_members == 2


def test_a_member_is_read_once_forward_and_a_truncated_one_is_an_error() -> None:
    data = _tar_gz(tarfile.PAX_FORMAT)
    source = _Forward(_Meter(igzip.open(io.BytesIO(data), "rb"), lambda n: None))
    tar = tarfile.TarFile(fileobj=source, mode="r")  # type: ignore[arg-type]
    members = iter(tar)
    first = next(members)
    second = next(members)
    with pytest.raises(tarfile.StreamError):  # the first member's bytes are behind: stream mode's rule
        source.seek(first.offset_data)
    with _open_tar_member(source, second, "") as member:
        assert member.read(10) == _members()[second.name][:10]

    cut = gzip.compress(gzip.decompress(data)[: second.offset_data + 100])
    source = _Forward(_Meter(igzip.open(io.BytesIO(cut), "rb"), lambda n: None))
    tar = tarfile.TarFile(fileobj=source, mode="r")  # type: ignore[arg-type]
    members = iter(tar)
    next(members)
    truncated = next(members)
    with _open_tar_member(source, truncated, "") as member, pytest.raises(tarfile.ReadError):
        member.read()
