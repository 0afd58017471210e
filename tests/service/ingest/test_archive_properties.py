"""Property-based tests of the archive reader (issue 9, "find the next ones before users do").

Arbitrary bytes — random, random behind a gzip / zip / tar signature, and valid tar.gz / tar / zip / log.gz / log
uploads with bytes flipped, cut, inserted or repeated — given to `extract_upload` and to the streaming
`scan_archive` only ever raise ArchiveError with one of the documented codes; on success every file is a
recognised log under the work directory; on failure the work directory is empty; nothing is ever written
outside it. Budget: tests/support/fuzz.py (FP8_POLICY_FUZZ_EXAMPLES for longer runs).
"""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from fp8_policy.service.ingest.archive import ERROR_CODES, ArchiveError, ExtractLimits, extract_upload
from fp8_policy.service.ingest.archive.stream import scan_archive
from tests.support.archives import meta_relpath, metadata_log, stats_log, stats_relpath, tar_bytes, zip_bytes
from tests.support.fuzz import fuzz

LIMITS = ExtractLimits(
    max_total_bytes=2 * 1024**2, max_ratio=50.0, ratio_floor_bytes=256 * 1024, max_members=200, max_member_bytes=1024**2
)
UF = "model.layers.1.fc1_activation_underflows%"
LOG = stats_log([(UF, it, it / 100) for it in range(0, 200, 10)])
MEMBERS = {
    stats_relpath(0): LOG,
    stats_relpath(1): LOG,
    meta_relpath(0): metadata_log({"model.layers.1.fc1": "x"}),
    "rank_0/notes.txt": b"skipped\n",
}
SEEDS = [tar_bytes(MEMBERS), tar_bytes(MEMBERS, mode="w"), zip_bytes(MEMBERS), gzip.compress(LOG, mtime=0), LOG]
SIGNATURES = [b"\x1f\x8b\x08\x00", b"PK\x03\x04", b"PK\x05\x06", b"\xef\xbb\xbf", b"2026-01-15 23:06:41,584 - INFO - "]


@st.composite
def mutated_seeds(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "repeat", "zero"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[at] ^= draw(st.integers(1, 255))
        elif op == "cut":
            del data[at : at + draw(st.integers(1, 512))]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=64))
        elif op == "repeat":
            data[at:at] = data[at : at + draw(st.integers(1, 1024))]
        elif op == "zero":
            size = draw(st.integers(1, 600))
            data[at : at + size] = bytes(len(data[at : at + size]))
    return bytes(data)


def tar_header_garbage(body: bytes) -> bytes:
    block = bytearray(body.ljust(512, b"\0")[:512])
    block[257:262] = b"ustar"
    return bytes(block) + body[512:]


uploads = st.one_of(
    mutated_seeds(),
    st.binary(max_size=2048),
    st.builds(lambda sig, body: sig + body, st.sampled_from(SIGNATURES), st.binary(max_size=2048)),
    st.binary(min_size=1, max_size=4096).map(tar_header_garbage),
)


def files_in(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() or p.is_symlink()}


@fuzz(400)
@given(data=uploads, hint=st.sampled_from([None, "run.log", "nvdlfw_inspect_globalrank-3.log.gz"]))
def test_extract_upload_raises_only_documented_errors_and_writes_only_under_dest(data: bytes, hint) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        src, dest = root / "upload.bin", root / "work"
        src.write_bytes(data)
        try:
            result = extract_upload(src, dest, LIMITS, filename_hint=hint)
        except ArchiveError as exc:
            assert exc.code in ERROR_CODES, exc.code
            str(exc).encode("utf-8")  # the message can be stored and shown
            assert files_in(dest) == set()
        else:
            written = {path.resolve() for _log, path in result.files}
            assert written == files_in(dest)
            assert all(path.is_relative_to(dest.resolve()) for path in written)
            assert result.total_bytes == sum(path.stat().st_size for path in written)
            assert any(log.kind == "stats" for log, _path in result.files)
        assert files_in(root) - files_in(dest) == {src}


@fuzz(300)
@given(data=uploads)
def test_streaming_scan_raises_only_documented_errors(data: bytes) -> None:
    with tempfile.TemporaryFile() as handle:
        handle.write(data)
        handle.seek(0)
        try:
            scan = scan_archive(handle, len(data), LIMITS)
        except ArchiveError as exc:
            assert exc.code in ERROR_CODES, exc.code
            str(exc).encode("utf-8")
        else:
            assert scan.stats and all(ranks for ranks in scan.stats.values())


def test_zip_whose_central_directory_points_before_the_file_is_corrupt_archive(tmp_path: Path) -> None:
    """Found by the fuzzer: a central-directory offset larger than the real one makes zipfile compute a negative
    member offset, and opening the member raised OSError EINVAL (an InternalError) instead of CorruptArchive."""
    data = bytearray(zip_bytes({stats_relpath(0): LOG}))
    end = data.rindex(b"PK\x05\x06")
    offset = int.from_bytes(data[end + 16 : end + 20], "little")
    data[end + 16 : end + 20] = (offset + 1000).to_bytes(4, "little")
    src = tmp_path / "upload.zip"
    src.write_bytes(bytes(data))

    for read in (
        lambda: extract_upload(src, tmp_path / "work", LIMITS),
        lambda: scan_archive(open(src, "rb"), len(data), LIMITS),  # noqa: SIM115 - closed with the test
    ):
        try:
            read()
        except ArchiveError as exc:
            assert exc.code == "CorruptArchive", exc
        else:
            raise AssertionError("a zip with a negative member offset was read")
