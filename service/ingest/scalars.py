"""An uploaded archive's training scalars (`scalars.jsonl`, policy/parse/scalars_file.py), read by the plan job's scan.

Belongs here: copying the member to a work file, its bytes and lines counted first (MAX_SCALARS_BYTES,
MAX_SCALARS_LINES), then checking it line by line (never more than MAX_SCALARS_BYTES on disk, one line in memory), the ingest report's `scalars` entry, and putting a kept file
into the archive store under the key a finalized live run keeps its streamed scalars under
(`runs/<id>/scalars.jsonl`, service/scalars/actions.py), so `GET /api/v1/live/runs/{id}/scalars` serves both alike
and deleting the run deletes it. A scalars file never fails the run: what is wrong with it is a named warning in
the report, and a file that is not kept leaves nothing in the store.
"""

from __future__ import annotations

import io
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from fp8_policy.policy.parse import scalars_file
from fp8_policy.service.ingest.archive.errors import _CORRUPT
from fp8_policy.service.ingest.archive.limits import CHUNK_BYTES
from fp8_policy.service.storage.archive import ArchiveMissing, ArchiveStore
from fp8_policy.service.storage.keys import SCALARS_NAME, scalars_key

log = logging.getLogger("fp8_policy.ingest")


def _lines(stream: io.BufferedIOBase) -> Iterator[tuple[bytes, int]]:
    """(line, its size) of the stream, read a chunk at a time; a line over MAX_LINE_BYTES comes as its first
    bytes only, with its whole size, so memory holds at most one chunk and one bounded line."""
    pending = b""
    skipping = 0  # > 0: inside an overlong line, this many bytes of it seen
    head = b""
    while chunk := stream.read(CHUNK_BYTES):
        start = 0
        while start < len(chunk):
            cut = chunk.find(b"\n", start)
            end = len(chunk) if cut < 0 else cut + 1
            piece = chunk[start:end]
            start = end
            if skipping:
                skipping += len(piece)
            elif len(pending) + len(piece) > scalars_file.MAX_LINE_BYTES:
                head, skipping, pending = (pending + piece)[:80], len(pending) + len(piece), b""
            else:
                pending += piece
            if cut < 0:
                continue
            if skipping:
                yield head, skipping
                skipping = 0
            else:
                yield pending, len(pending)
                pending = b""
    if skipping:
        yield head, skipping
    elif pending:
        yield pending, len(pending)


def _spool(stream: io.BufferedIOBase | IO[bytes], raw: IO[bytes], check: scalars_file.ScalarsCheck) -> bool:
    """Copy the member to `raw` a chunk at a time, counting its bytes and lines (bytes.count: no per-line work);
    False, with `check` saying which bound, as soon as it passes MAX_SCALARS_BYTES or MAX_SCALARS_LINES. A file of
    11 M tiny lines (a 26 KB upload) is then refused in the time of decompressing it, where reading it line by line
    kept the ingest worker busy a minute."""
    size = lines = 0
    while chunk := stream.read(CHUNK_BYTES):
        size += len(chunk)
        lines += chunk.count(b"\n")
        if lines > scalars_file.MAX_SCALARS_LINES:
            check.too_large = check.too_many_lines = True
            return False
        if size > scalars_file.MAX_SCALARS_BYTES:
            check.too_large = True
            return False
        raw.write(chunk)
    return True


class ScalarsReader:
    """`read` is the scan's `on_scalars` callback; then `report()` for the plan result and `keep()` to store it."""

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self.members: list[str] = []
        self.check: scalars_file.ScalarsCheck | None = None
        self.path: Path | None = None
        self.streamed = False  # read from a finalized live run's stored scalars, not from the archive

    def read(self, member: str, stream: io.BufferedIOBase | IO[bytes]) -> None:
        self.members.append(member)
        if len(self.members) > 1:  # more than one: none is kept (report()); the scan reads the rest to the end
            self.discard()
            return
        check = scalars_file.ScalarsCheck(member)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        with (
            tempfile.TemporaryFile(dir=self.work_dir, prefix="scalars-raw-") as raw,
            tempfile.NamedTemporaryFile(dir=self.work_dir, prefix="scalars-", delete=False) as copy,
        ):
            self.path = Path(copy.name)
            try:
                if _spool(stream, raw, check):  # within both bounds: now read line by line
                    raw.seek(0)
                    for line, size in _lines(raw):
                        if size > scalars_file.MAX_LINE_BYTES:
                            check.overlong(line, size)
                        elif check.line(line):
                            copy.write(line if line.endswith(b"\n") else line + b"\n")
            except _CORRUPT as exc:  # its own gzip is damaged: a warning, not a failed run (a damaged archive
                check.broken = f"{type(exc).__name__}: {exc}"[:200]  # fails at the scan's next read of it)
        self.check = check
        if not check.verdict()["kept"]:
            self.discard()

    def read_streamed(self, store: ArchiveStore, run_id: int) -> None:
        """A finalized live run's tar holds no scalars member: the scalars it streamed, which its finalize kept in
        the store (service/live/story.py `keep_scalars`), are checked the same way for the report (its `lr` decay:
        policy/parse/lr_schedule.py) and left as stored. Nothing when the archive had a member or the run streamed none."""
        if self.members:
            return
        try:
            handle = store.open(scalars_key(run_id))
        except ArchiveMissing:
            return
        with handle:
            self.read(SCALARS_NAME, handle)
        self.discard()  # stored already: not put again by keep()
        self.streamed = True

    def report(self) -> dict[str, Any] | None:
        """The `scalars` entry of the ingest report; None when the archive holds no scalars member (and the run
        streamed none); `streamed: true` when read from a live run's streamed scalars."""
        if not self.members:
            return None
        if len(self.members) > 1:
            return scalars_file.ambiguous(self.members)
        assert self.check is not None
        return {**self.check.verdict(), "streamed": True} if self.streamed else self.check.verdict()

    def keep(self, store: ArchiveStore, run_id: int) -> None:
        """Put the checked file into the store (once the whole archive was scanned without error)."""
        report = self.report()
        if report is not None and report["warning"]:
            log.warning("run %s: %s", run_id, report["warning"])
        if self.path is None or report is None or not report["kept"]:
            return
        store.put_file(self.path, scalars_key(run_id))
        self.path = None

    def discard(self) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            self.path = None


def forget_scalars(store: ArchiveStore, run_id: int, plan: dict[str, Any] | None) -> None:
    """A failed run keeps nothing its ingest stored: the scalars its plan job kept are deleted (a live run's
    streamed scalars, kept at its finalize, are not the plan job's and stay)."""
    scalars = (plan or {}).get("scalars") or {}
    if not scalars.get("kept") or scalars.get("streamed"):
        return
    try:
        store.delete(scalars_key(run_id))
    except Exception:  # a failed run is failed already: its scalars are removed with it at the latest
        log.warning("run %s: its training scalars could not be deleted", run_id, exc_info=True)
