"""Use cases of live runs: create one, append log bytes at an offset, watch for early warnings, finalize.

A live run is a `runs` row with status `live` whose log files arrive piece by piece (`fp8-policy watch` or
`fp8_policy.LiveUploader`). Appends follow the resumable-upload rule of the tus protocol (https://tus.io/protocols/
resumable-upload#core-protocol): a piece names the byte offset it starts at; re-sending bytes already received
is harmless (they must match), a piece that would leave a gap is refused with the offset expected next
(409 + `Upload-Offset`). Each append of a statistics log parses only its new whole lines and feeds the detectors
(policy/live/events.py): the cost of an increment is proportional to its size. Finalizing packs the received
files into one tar and hands it to the normal ingest, so the finished run equals the same logs uploaded whole.

Received bytes live under `<data_dir>/live/<run_id>/<path>` (one machine's disk: live runs are served by the API
process that owns that directory, or by API processes sharing it).
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import secrets
import shutil
import tarfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from sqlalchemy.orm import Session

from fp8_policy.db.live import LiveRepository, StoredEvent
from fp8_policy.db.run_models import Run, RunStatus
from fp8_policy.db.runs import NewRun, RunRepository
from fp8_policy.policy.analysis.format_bands import SeriesBands
from fp8_policy.policy.live import scalar_events
from fp8_policy.policy.live import switch as live_switch
from fp8_policy.policy.live.batch import advance_piece
from fp8_policy.policy.live.events import LiveEvent
from fp8_policy.policy.live.grouping import group_events
from fp8_policy.policy.live.table import SeriesTable
from fp8_policy.policy.parse import scalars_file
from fp8_policy.policy.parse.log_files import classify_log_path
from fp8_policy.policy.parse.stats_log import NoStatsLines, ParsedStats, StatsLogParser, TooManyMetrics
from fp8_policy.policy.parse.stats_names import KnownNames
from fp8_policy.policy.thresholds import Thresholds
from fp8_policy.service import limits
from fp8_policy.service.alerts.actions import queue_for_events
from fp8_policy.service.auth.actions import Principal
from fp8_policy.service.errors import (
    InvalidLivePath,
    NoStatsLogs,
    NotFound,
    NotLive,
    NotRunOwner,
    OffsetConflict,
    OffsetGap,
)
from fp8_policy.service.ingest.kernel_warmup import kernels_for
from fp8_policy.service.ingest.upload import ReceivedUpload
from fp8_policy.service.live import kept as kept_files
from fp8_policy.service.live.naming import global_names
from fp8_policy.service.live.pieces import Piece, Region, as_piece, last_newline
from fp8_policy.service.runs.ownership import may_write
from fp8_policy.service.runs.writes import _store_upload_file as store_upload_file  # the one way uploads are stored
from fp8_policy.service.runs.writes import parse_upload_fields
from fp8_policy.service.scalars import actions as scalars
from fp8_policy.service.storage import keys
from fp8_policy.service.storage.archive import ArchiveStore
from fp8_policy.service.storage.disk import PART_SUFFIX, hold_part

LIVE = RunStatus.live
SCALARS_STATE_KEY = "__scalars__"  # the scalar detectors' state, next to the series' table
SERIES_STATE_KEY = "__series__"  # every series' detector state (policy/live/table.SeriesTable's document)
SCALARS_NAME = keys.SCALARS_NAME
MAX_PATH_CHARS = 500
_NO_COPY_RANGE = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF}  # copy through Python
_locks: dict[int, threading.Lock] = {}
_locks_guard = threading.Lock()


@dataclass(frozen=True, slots=True)
class AppendResult:
    path: str
    size: int
    events: list[StoredEvent]  # raised by this piece, with their ids
    alerts_queued: int = 0  # webhook deliveries waiting to be sent


def _run_lock(run_id: int) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(run_id, threading.Lock())


def live_dir(data_dir: Path, run_id: int) -> Path:
    return data_dir / "live" / str(run_id)


def create_live_run(session: Session, fields: dict[str, Any], uploaded_by: str | None) -> Run:
    text_fields = {k: v for k, v in fields.items() if k in ("name", "project", "tags", "metadata") and v is not None}
    if isinstance(text_fields.get("tags"), list):
        text_fields["tags"] = ",".join(str(t) for t in text_fields["tags"])
    if isinstance(text_fields.get("metadata"), dict):
        text_fields["metadata"] = json.dumps(text_fields["metadata"])
    name, project, tags, metadata = parse_upload_fields(text_fields)
    # a live run has no bytes yet: a random placeholder keeps (project, sha256) unique until finalize
    run = RunRepository(session).add(
        NewRun(name, project, tags, metadata, secrets.token_hex(32), None, 0, "", uploaded_by)
    )
    run.status = LIVE
    session.flush()
    return run


def _live_run(session: Session, run_id: int, mode: str, caller: Principal | None, *, admin_too: bool) -> Run:
    """The live run, its row locked first (RunRepository.lock: a delete or a finalize racing this request waits
    for it, or is waited for, and is then seen), if `caller` may write to it."""
    run = RunRepository(session).lock(run_id, mode)
    if run is None:
        raise NotFound(f"run {run_id} not found")
    if caller is not None and not may_write(run, caller, admin_too=admin_too):
        raise NotRunOwner(
            f"run {run_id} was started by another token: only that token"
            f"{' (or an admin token)' if admin_too else ''} may {'finalize' if admin_too else 'append to'} it"
        )
    if run.status != LIVE:
        raise NotLive(f"run {run_id} is {run.status}, not live: it takes no more log bytes")
    return run


def file_kind(path: str) -> str:
    """stats | metadata | scalars for an accepted path (as in an archive); 400 for anything else."""
    if not path or len(path) > MAX_PATH_CHARS or "\\" in path:
        raise InvalidLivePath(f"invalid live file path (1..{MAX_PATH_CHARS} characters, '/' separators)")
    limits.check_text("a live file path", path, MAX_PATH_CHARS, error=InvalidLivePath)  # NUL, controls, surrogates
    # One spelling per file: the received bytes are keyed by this string, so a path that names the same file
    # another way (`rank_0//x`, `./rank_0/x`, `rank_0/x/`) is refused rather than normalised (PurePosixPath would
    # quietly drop the extra separators and `.`: two rows, one file on disk).
    parts = tuple(path.split("/"))
    if any(p in ("..", ".", "") for p in parts) or path.endswith(".gz"):
        raise InvalidLivePath(
            f"invalid live file path {path!r}: relative, one '/' between names, no '.' or '..', uncompressed"
        )
    if parts[-1] == SCALARS_NAME and len(parts) == 1:
        return "scalars"
    log = classify_log_path(path)
    if log is None:
        raise InvalidLivePath(
            f"{path!r} is neither an nvdlfw_inspect log (rank_N/nvdlfw_inspect_statistics_logs/... or "
            f"nvdlfw_inspect_logs/...) nor {SCALARS_NAME}",
        )
    return log.kind


def append(
    session: Session,
    data_dir: Path,
    run_id: int,
    path: str,
    offset: int,
    body: bytes | Piece,
    thresholds: Thresholds | None = None,
    caller: Principal | None = None,
) -> AppendResult:
    """Store `body` at `offset` of the run's file `path` and run the detectors on the new whole lines.
    `caller`: the request's principal (only the run's creating token appends); None skips the check."""
    kind = file_kind(path)
    if kind == "stats":  # before any lock: waiting here for the compiled parser must hold no run or row lock
        kernels_for(len(body) if isinstance(body, bytes) else body.size)
    with _run_lock(run_id):
        run = _live_run(session, run_id, "share", caller, admin_too=False)
        repo = LiveRepository(session)
        row = repo.file_for_update(run_id, path, kind)
        if offset > row.size:
            raise OffsetGap(
                f"{path}: {row.size} bytes received so far; a piece at offset {offset} would leave "
                f"a gap: send from offset {row.size}",
                expected=row.size,
            )
        piece = as_piece(body)  # compared and copied 1 MiB at a time: a piece is never whole in memory
        if kind == "scalars":
            limits.check_live_scalars_size(path, max(row.size, offset + piece.size))
        disk = live_dir(data_dir, run_id) / path
        disk.parent.mkdir(parents=True, exist_ok=True)
        overlap = min(row.size - offset, piece.size)
        with open(os.open(disk, os.O_RDWR | os.O_CREAT, 0o644), "r+b") as handle:
            if overlap:
                handle.seek(offset)
                if not piece.matches(handle, overlap):
                    raise OffsetConflict(
                        f"{path}: bytes at offset {offset} differ from those received before; "
                        f"continue from offset {row.size}",
                        expected=row.size,
                    )
            if piece.size > overlap:
                handle.truncate(row.size)  # bytes of an append whose commit failed are not kept
                handle.seek(row.size)
                row.size += _copy_in(piece, overlap, handle)
        events: list[LiveEvent] = []
        if kind == "stats" and row.size > row.parsed_offset:
            schedule = live_switch.planned(run.run_metadata)  # a planned precision switch: switch_now
            metadata = dict(run.run_metadata or {})
            events = _detect(repo, run_id, disk, path, row, thresholds or Thresholds(), metadata, schedule)
        elif kind == "scalars" and row.size > row.parsed_offset:  # the streamed lr can make a planned switch due
            events = _detect_scalars(repo, run_id, disk, row, live_switch.planned(run.run_metadata))
        events = group_events(events)  # one event per (layer, kind) of this piece
        stored = repo.events(run_id, min(repo.add_events(run_id, events)) - 1) if events else []
        alerts = queue_for_events(session, run_id, run.project, stored) if stored else 0
        return AppendResult(path, row.size, stored, alerts)


def _copy_in(piece: Piece, start: int, handle: BinaryIO) -> int:
    """Append the piece's bytes from `start` on at the handle's position; returns how many. A received piece is
    copied file to file by the kernel (copy_file_range: one copy, none through Python; reading 8 MiB into bytes and
    writing them back was ~15 % of a bulk piece's service CPU); on a file system that cannot, through Python."""
    if piece.path is None or not hasattr(os, "copy_file_range"):
        return piece.write_from(handle, start)
    begin = handle.tell()
    at, offset, left = begin, start, piece.size - start
    with open(piece.path, "rb") as source:
        while left > 0:
            try:
                copied = os.copy_file_range(source.fileno(), handle.fileno(), left, offset, at)
            except OSError as exc:
                if exc.errno in _NO_COPY_RANGE and at == begin:
                    return piece.write_from(handle, start)
                raise
            if copied <= 0:
                raise OSError(f"{piece.path} is shorter than its {piece.size} received bytes")
            offset, at, left = offset + copied, at + copied, left - copied
    handle.seek(at)
    return at - begin


def _detect(
    repo: LiveRepository,
    run_id: int,
    disk: Path,
    path: str,
    row: Any,
    thresholds: Thresholds,
    metadata: dict[str, Any],
    schedule: list[live_switch.PlannedPhase] | None = None,
) -> list[LiveEvent]:
    """Parse the file's new whole lines and advance the detector state of all their series at once (one load and
    one save of the run's state document, policy/live/batch.py)."""
    log = classify_log_path(path)
    rank = log.rank if log is not None else 0
    with open(disk, "rb") as handle:  # the new whole lines reach the parser as a stream, block by block
        cut = last_newline(handle, row.parsed_offset, row.size)
        if cut < 0:
            return []  # no whole line yet
        start, row.parsed_offset = row.parsed_offset, cut + 1
        kernels_for(cut + 1 - start)  # a large piece waits for the compiled parser (interpreted: ~2 s per MB)
        stamp = repo.state_stamp_for_update(run_id)
        try:
            parsed, names = _parse(handle, start, cut + 1 - start, path, kept_files.known_names(run_id, stamp, path))
        except NoStatsLines:
            return []
    kept = kept_files.take_table(run_id)
    if kept is not None and stamp is not None and kept[0] == stamp:  # this process saved the stored document
        _stamp, others, table, files = kept
    else:
        stored = repo.state_for_update(run_id)
        table = SeriesTable.from_stored(stored, SERIES_STATE_KEY)  # every series of the run, as arrays
        others = {key: data for key, data in stored.items() if "\t" not in key and key != SERIES_STATE_KEY}
        files = {}
    metric_names = global_names(metadata, rank, parsed.names)  # as the finalized run names them (live/naming.py)
    bands = SeriesBands.from_metadata(thresholds, metadata, metric_names)  # each series' bands and scale reading
    events = advance_piece(
        table, rank, metric_names, parsed.offsets, parsed.iterations, parsed.values, thresholds, bands=bands
    )
    if schedule:
        switch = others.setdefault(live_switch.STATE_KEY, {})
        events += live_switch.advance(
            switch, schedule, rank, metric_names, parsed.offsets, parsed.iterations, parsed.values
        )
    stamp = repo.save_state(run_id, {**others, SERIES_STATE_KEY: table.to_document()})
    kept_files.keep_table(run_id, (stamp, others, table, {**files, path: names}))
    return events


def _parse(
    handle: io.BufferedIOBase, start: int, length: int, path: str, known: KnownNames | None
) -> tuple[ParsedStats, KnownNames]:
    """The piece's whole lines parsed (with the file's known names when kept), and the names to keep."""
    parser = StatsLogParser(workers=1, known=known)
    handle.seek(start)
    try:
        parser.feed(Region(handle, length), path)
    except TooManyMetrics:
        if known is None:
            raise
        return _parse(handle, start, length, path, None)  # the names of earlier pieces filled the table: afresh
    return parser.finish(), parser.known_names()


def _new_whole_lines(disk: Path, row: Any) -> bytes:
    """The bytes of whole lines after `row.parsed_offset` (which moves past them)."""
    with open(disk, "rb") as handle:
        handle.seek(row.parsed_offset)
        new = handle.read(row.size - row.parsed_offset)
    cut = new.rfind(b"\n")
    if cut < 0:
        if len(new) > scalars_file.MAX_LINE_BYTES:  # no record is this long: skipped, not read again per piece
            row.parsed_offset = row.size
        return b""
    row.parsed_offset += cut + 1
    return new[: cut + 1]


def _detect_scalars(repo: LiveRepository, run_id: int, disk: Path, row: Any, schedule: list[Any]) -> list[LiveEvent]:
    """Training scalars: spikes and plateaus (policy/live/scalar_events.py), the lr decay (policy/live/switch.py)."""
    records = scalar_events.parse_lines(_new_whole_lines(disk, row)).records
    if not records:
        return []
    stored = repo.state_for_update(run_id)
    state = scalar_events.ScalarState.from_dict(stored.get(SCALARS_STATE_KEY, {}))
    events = scalar_events.advance(state, records) + live_switch.advance_lr(stored, schedule, records)
    stored[SCALARS_STATE_KEY] = state.to_dict()
    repo.save_state(run_id, stored)
    return events


def finalize(
    session: Session, data_dir: Path, store: ArchiveStore, run_id: int, caller: Principal | None = None
) -> Run:
    """Pack the received logs into one tar, store it as the run's upload and queue the normal ingest.
    `caller`: the request's principal (the run's creating token or an admin token); None skips the check."""
    with _run_lock(run_id):
        run = _live_run(session, run_id, "write", caller, admin_too=True)
        repo = LiveRepository(session)
        files = [f for f in repo.files(run_id) if f.kind in ("stats", "metadata")]
        if not any(f.kind == "stats" for f in files):
            raise NoStatsLogs(f"run {run_id} received no statistics log yet: nothing to finalize")
        source = live_dir(data_dir, run_id)
        uploads = data_dir / "uploads"
        uploads.mkdir(parents=True, exist_ok=True)
        # a `.part` held under its lock until it is stored: one left by a killed process is removed by the next
        # start-up's sweep (service/storage/disk.py), as an upload's
        tar_path = uploads / f"live-{run_id}-{uuid.uuid4().hex}.tar{PART_SUFFIX}"
        try:
            with open(tar_path, "wb") as held:
                hold_part(held)
                with tarfile.open(fileobj=held, mode="w", format=tarfile.PAX_FORMAT) as tar:
                    for f in files:
                        info = tar.gettarinfo(str(source / f.path), arcname=f.path)
                        info.size = f.size  # exactly the acknowledged bytes
                        info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                        with open(source / f.path, "rb") as handle:
                            tar.addfile(info, Region(handle, f.size))
                held.flush()
                digest, size = _sha256(tar_path)
                upload = ReceivedUpload(tar_path, digest, size, f"live-run-{run_id}.tar")
                run.upload_path = store_upload_file(session, data_dir, store, run_id, upload)
                scalars.keep_scalars(store, data_dir, run_id)  # the training scalars stay with the run
        finally:
            tar_path.unlink(missing_ok=True)
        if RunRepository(session).find_by_hash(run.project, digest) is None:
            run.sha256 = digest
        run.upload_filename, run.upload_bytes, run.status = upload.filename, size, RunStatus.queued
        repo.forget_files(run_id)
        session.flush()
        return run


def remove_received_logs(data_dir: Path, run_id: int) -> None:
    """After finalize: the logs are in the stored tar; training scalars stay for the run's charts."""
    root = live_dir(data_dir, run_id)
    try:
        children = list(root.iterdir())
    except (FileNotFoundError, NotADirectoryError):  # none received, or the run was deleted meanwhile
        return
    for child in children:
        if child.name != SCALARS_NAME:
            shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)


def _sha256(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size
