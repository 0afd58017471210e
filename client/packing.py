"""What an upload body is made of: a log directory packed into a tar.gz on disk, a byte-counting reader, and the
form fields sent beside it.

Belongs here: recognising nvdlfw_inspect log paths (the same grammar as the service's `policy/parse/log_files.py`,
repeated because the client never imports `policy/`), packing only those files (and the training scalars,
`scalars.jsonl`, when there are some) with their relative paths into
a temporary file (never the whole archive in memory), and the tiny stderr progress bar. Must not be here: HTTP.
Packing is deterministic (sorted members, normalised owners, gzip mtime 0), so uploading the same directory
twice sends the same bytes and the service answers with the existing run.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import sys
import tarfile
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TextIO

from fp8_policy.client.errors import NoLogFiles

# `[any/folders/][rank_N/]nvdlfw_inspect_{statistics_,}logs/nvdlfw_inspect[_YYYYmmdd_HHMMSS]_globalrank-R.log[.gz]`
LOG_PATH = re.compile(
    r"(?:^|/)(?:rank_\d+/)?(?:nvdlfw_inspect_logs|nvdlfw_inspect_statistics_logs)/"
    r"nvdlfw_inspect(?:_\d{8}_\d{6})?_globalrank-\d+\.log(?:\.gz)?$"
)
# The training scalars (JSON lines {"step", "loss", "grad_norm", "lr", ...}) the service keeps with the run: the file
# `fp8-policy watch --scalars` streams, packed at the archive's root (`upload --scalars FILE`, or DIR/scalars.jsonl).
SCALARS_NAME = "scalars.jsonl"
# Logs are text and compress well even at level 1; speed matters more than size for multi-GB logs.
COMPRESS_LEVEL = 1


def is_log_path(relpath: str) -> bool:
    """True for an nvdlfw_inspect metadata or statistics log path (POSIX separators)."""
    return LOG_PATH.search(relpath) is not None


def find_log_files(root: Path) -> list[tuple[Path, str]]:
    """(file, archive name) of every log under `root`, sorted by archive name.

    Archive names are relative to `root`; when `root` itself is a `nvdlfw_inspect_*logs` (or `rank_N`) folder,
    its own name is kept as the first path component so the service still recognises the files.
    """
    root = Path(root)
    found: dict[str, Path] = {}
    for folder, _dirs, names in os.walk(root):
        for name in names:
            path = Path(folder, name)
            rel = path.relative_to(root).as_posix()
            for arcname in (rel, f"{root.name}/{rel}"):
                if is_log_path(arcname) and path.is_file():
                    found[arcname] = path
                    break
    return [(found[arcname], arcname) for arcname in sorted(found)]


def _normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def pack_directory(root: Path, scalars: Path | None = None) -> IO[bytes]:
    """The log files under `root` as a tar.gz in an anonymous temporary file, positioned at 0, with the training
    scalars as `scalars.jsonl` at the root: the file `scalars` names, else `root/scalars.jsonl` when present.

    Raises NoLogFiles (before anything is sent) when the directory holds no nvdlfw_inspect logs.
    The caller closes the returned file, which deletes it.
    """
    files = find_log_files(root)
    if scalars is None and (Path(root) / SCALARS_NAME).is_file():
        scalars = Path(root) / SCALARS_NAME
    if files and scalars is not None:
        files = sorted([*files, (Path(scalars), SCALARS_NAME)], key=lambda pair: pair[1])
    if not files:
        raise NoLogFiles(
            f"{root} holds no nvdlfw_inspect log files (expected [rank_N/]nvdlfw_inspect_statistics_logs/"
            "nvdlfw_inspect[_stamp]_globalrank-N.log[.gz] and nvdlfw_inspect_logs/...)"
        )
    spool = tempfile.TemporaryFile(prefix="fp8-policy-", suffix=".tar.gz")  # noqa: SIM115 (returned open to the caller)
    try:
        with (
            gzip.GzipFile(filename="", mode="wb", fileobj=spool, compresslevel=COMPRESS_LEVEL, mtime=0) as gz,
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT, dereference=True) as tar,
        ):
            for path, arcname in files:
                tar.add(path, arcname=arcname, recursive=False, filter=_normalise)
        spool.seek(0)
    except BaseException:
        spool.close()
        raise
    return spool


class ProgressReader:
    """Wraps a binary file for httpx's multipart encoder, reporting bytes read to `on_progress(sent, total)`."""

    def __init__(self, raw: IO[bytes], on_progress: Callable[[int, int], object]) -> None:
        self._raw = raw
        self._on_progress = on_progress
        self.total = os.fstat(raw.fileno()).st_size
        self.sent = 0

    def read(self, size: int = -1) -> bytes:
        chunk = self._raw.read(size)
        self.sent += len(chunk)
        self._on_progress(self.sent, self.total)
        return chunk

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        position = self._raw.seek(offset, whence)
        self.sent = position
        return position

    def tell(self) -> int:
        return self._raw.tell()

    def fileno(self) -> int:
        return self._raw.fileno()


class StderrBar:
    """A one-line `label [#####-----]  45%  12.3/27.1 MiB` bar, redrawn only when the percentage changes."""

    WIDTH = 30

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self._last = -1

    def __call__(self, sent: int, total: int) -> None:
        percent = 100 if total <= 0 else min(100, sent * 100 // total)
        if percent == self._last:
            return
        self._last = percent
        filled = self.WIDTH * percent // 100
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        self.stream.write(f"\r{self.label} [{bar}] {percent:3d}%  {sent / 2**20:.1f}/{total / 2**20:.1f} MiB")
        self.stream.flush()

    def close(self) -> None:
        if self._last >= 0:
            self.stream.write("\n")
            self.stream.flush()


def upload_fields(
    name: str | None, project: str | None, tags: Sequence[str] | str | None, metadata: Mapping[str, Any] | None
) -> dict[str, str]:
    """The multipart form fields the service reads next to `file` (tags comma-separated, metadata JSON)."""
    fields: dict[str, str] = {}
    if name:
        fields["name"] = name
    if project:
        fields["project"] = project
    if tags:
        fields["tags"] = tags if isinstance(tags, str) else ",".join(tags)
    if metadata is not None:
        fields["metadata"] = json.dumps(dict(metadata))
    return fields
