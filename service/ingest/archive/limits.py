"""Extraction limits and their accounting (_Budget, _Meter, _Skipped), and the ExtractResult they lead to."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from fp8_policy.policy.parse.log_files import LogFile
from fp8_policy.service.ingest.archive.errors import ArchiveError

MiB = 1024**2
GiB = 1024**3
CHUNK_BYTES = 1 * MiB
MAX_SKIPPED_SAMPLES = 5


@dataclass(frozen=True, slots=True)
class ExtractLimits:
    """Limits checked while streaming, so a bomb is stopped at the limit, not after it is written."""

    max_total_bytes: int = 8 * GiB  # uncompressed bytes read from the archive stream, plus inner gzip output
    max_ratio: float = 250.0  # uncompressed total / upload size on disk
    ratio_floor_bytes: int = 64 * MiB  # the ratio applies only past this total, so small files are not flagged
    max_members: int = 10_000  # every member, directories and skipped files included
    max_member_bytes: int = 4 * GiB  # one written file, uncompressed


DEFAULT_LIMITS = ExtractLimits()


@dataclass(frozen=True, slots=True)
class ExtractResult:
    """What was written: files in archive order, with the LogFile of the member name and the path on disk."""

    files: list[tuple[LogFile, Path]]
    total_bytes: int  # bytes written under dest
    skipped_members: int  # regular files not recognised as nvdlfw_inspect logs
    skipped_samples: tuple[str, ...]  # the first few of them
    format: str  # tar.gz | tar | zip | log.gz | log


@dataclass(slots=True)
class _Skipped:
    count: int = 0
    samples: list[str] = field(default_factory=list)

    def add(self, name: str) -> None:
        self.count += 1
        if len(self.samples) < MAX_SKIPPED_SAMPLES:
            self.samples.append(name[:200])


class _Budget:
    """Counts uncompressed bytes and members against the limits; raises the moment one is passed."""

    def __init__(self, limits: ExtractLimits, upload_bytes: int) -> None:
        self.limits = limits
        self.upload_bytes = upload_bytes
        self.total = 0
        self.members = 0

    def add(self, n: int) -> None:
        self.total += n
        if self.total > self.limits.max_total_bytes:
            raise ArchiveError("ArchiveTooLarge", f"more than {self.limits.max_total_bytes} bytes uncompressed")
        ratio = self.total / self.upload_bytes
        if self.total > self.limits.ratio_floor_bytes and ratio > self.limits.max_ratio:
            raise ArchiveError(
                "CompressionRatioExceeded",
                f"{self.total} bytes from a {self.upload_bytes}-byte upload (ratio above {self.limits.max_ratio:g})",
            )

    def count_members(self, n: int = 1) -> None:
        self.members += n
        if self.members > self.limits.max_members:
            raise ArchiveError("TooManyMembers", f"more than {self.limits.max_members} members")

    def check_member_size(self, name: str, size: int) -> None:
        if size > self.limits.max_member_bytes:
            raise ArchiveError("ArchiveTooLarge", f"{name}: more than {self.limits.max_member_bytes} bytes")


class _Meter:
    """A read-only stream wrapper that reports every chunk it returns (never trusts declared sizes)."""

    def __init__(self, raw: IO[bytes], on_bytes: Callable[[int], None]) -> None:
        self.raw = raw
        self.on_bytes = on_bytes

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0:
            return b"".join(iter(lambda: self.read(CHUNK_BYTES), b""))
        data = self.raw.read(n)
        self.on_bytes(len(data))
        return data

    def readinto(self, view: memoryview) -> int:
        """Into the caller's buffer (one copy less than read()), when the wrapped stream can."""
        readinto = getattr(self.raw, "readinto", None)
        if readinto is None:
            data = self.read(len(view))
            view[: len(data)] = data
            return len(data)
        n: int = readinto(view)
        self.on_bytes(n)
        return n
