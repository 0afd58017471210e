"""Use cases behind the run routes: create from an upload, read, list, delete, export."""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import event
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, SessionTransaction, sessionmaker

from fp8_policy.db import run_edits
from fp8_policy.db.codec import decode_iterations, decode_values
from fp8_policy.db.models import Run, RunStatus
from fp8_policy.db.repositories import NewRun, RunRepository, tags_of
from fp8_policy.db.session import session_scope
from fp8_policy.db.summaries import SummaryRepository
from fp8_policy.policy import csv_export
from fp8_policy.policy.analysis.findings import Pattern
from fp8_policy.policy.recommend import POLICY_VERSION
from fp8_policy.policy.records import nonfinite_text
from fp8_policy.policy.safe_text import displayable, displayable_json
from fp8_policy.service import limits
from fp8_policy.service.errors import NotFound, NotReady
from fp8_policy.service.ingest.store import ArchiveStore
from fp8_policy.service.ingest.upload import ReceivedUpload
from fp8_policy.service.runs.schemas import (
    LayerRead,
    RunEdit,
    RunList,
    RunRead,
    RunSummaryRead,
    SeriesPoints,
    SeriesRead,
    StatSummary,
)

MAX_TAGS = limits.MAX_TAGS
log = logging.getLogger("fp8_policy.runs")


# What an upload's file name ends with when it names an archive or a log, not the run (the web form's rule too).
_ARCHIVE_SUFFIX = re.compile(r"\.(tar\.gz|tgz|tar|zip|log\.gz|log|gz)$", re.IGNORECASE)


def default_run_name(filename: str | None) -> str | None:
    """The name of a run uploaded without one: its file name without the archive suffix (`esm2.tar.gz` ->
    `esm2`; the CLI sends `<folder>.tar.gz` for a folder), None for a raw body without a file name."""
    cleaned = limits.clean_filename(filename)  # control characters shown as U+FFFD, as the stored file name
    if not cleaned:
        return None
    stem = _ARCHIVE_SUFFIX.sub("", cleaned.rsplit("/", 1)[-1]).strip()
    return stem[: limits.MAX_NAME_CHARS] or None


def parse_upload_fields(
    fields: dict[str, str], filename: str | None = None
) -> tuple[str | None, str, tuple[str, ...], dict[str, Any]]:
    """Validate name / project / tags / metadata from form fields or query parameters; without a name, the
    upload's file name names the run (`default_run_name`)."""
    name = (fields.get("name") or "").strip() or default_run_name(filename)
    project = (fields.get("project") or "").strip() or "default"
    if name:
        limits.check_text("name", name, limits.MAX_NAME_CHARS)
    limits.check_text("project", project, limits.MAX_NAME_CHARS)
    tags = limits.check_tags((fields.get("tags") or "").split(","))
    return name, project, tags, limits.parse_metadata(fields.get("metadata"))


@dataclass(frozen=True, slots=True)
class StoredUpload:
    """What an upload became: `run`, whether it needs an ingest job (`queued`), and whether the project already
    held these bytes (`duplicate`: `run` is that earlier run, under its own name, tags and metadata)."""

    run: Run
    queued: bool
    duplicate: bool


def create_run(
    session: Session,
    data_dir: Path,
    upload: ReceivedUpload,
    fields: dict[str, str],
    uploaded_by: str | None = None,
    store: ArchiveStore | None = None,
) -> tuple[Run, bool]:
    """`store_upload` as (run, queued)."""
    stored = store_upload(session, data_dir, upload, fields, uploaded_by, store)
    return stored.run, stored.queued


def store_upload(
    session: Session,
    data_dir: Path,
    upload: ReceivedUpload,
    fields: dict[str, str],
    uploaded_by: str | None = None,
    store: ArchiveStore | None = None,
) -> StoredUpload:
    """Store a new queued run for the upload, or answer with the existing run with the same bytes.
    `uploaded_by` is the access token's name (None when anonymous).

    Known bytes are never stored twice: the answer is the earlier run (`duplicate`), whatever name this upload
    asked for; the route says so (`duplicate_of`) and the CLI prints it. `queued` is True when the run needs an
    ingest job — a new run, or an existing one whose earlier ingest failed for a server-side reason
    (RETRY_ERRORS) or whose upload is gone: the same bytes bring it back. The upload file is moved to the archive
    store or deleted.

    Nothing is half-stored: every field is checked before the first write; no SAVEPOINT (with pysqlite,
    releasing the outermost one commits the row); and the stored upload is removed again when the transaction
    rolls back, so a failed commit leaves neither a row nor an orphaned runs/<id>/upload.bin.
    """
    name, project, tags, metadata = parse_upload_fields(fields, upload.filename)
    filename = limits.clean_filename(upload.filename)
    store = store or ArchiveStore(str(data_dir))
    repo = RunRepository(session)
    existing = repo.find_by_hash(project, upload.sha256)
    if existing is not None:
        run, queued = _same_bytes_again(session, data_dir, store, existing, upload)
        return StoredUpload(run, queued, duplicate=True)
    try:
        run = repo.add(NewRun(name, project, tags, metadata, upload.sha256, filename, upload.size, "", uploaded_by))
    except IntegrityError:  # the same bytes arrived concurrently: the whole (read-only so far) transaction goes
        session.rollback()
        winner = repo.find_by_hash(project, upload.sha256)
        if winner is None:
            raise
        upload.path.unlink(missing_ok=True)
        return StoredUpload(winner, queued=False, duplicate=True)
    run.upload_path = _store_upload_file(session, data_dir, store, run.id, upload)
    session.flush()
    return StoredUpload(run, queued=True, duplicate=False)


def _same_bytes_again(
    session: Session, data_dir: Path, store: ArchiveStore, run: Run, upload: ReceivedUpload
) -> tuple[Run, bool]:
    if not needs_its_bytes_again(run, store):
        upload.path.unlink(missing_ok=True)
        return run, False
    run.upload_path = _store_upload_file(session, data_dir, store, run.id, upload)
    RunRepository(session).requeue_failed(run.id, upload_path=run.upload_path)
    session.refresh(run)
    return run, True


# Failures of uploads that never held a log (service/ingest/archive/errors.py): not an archive nor a log, empty
# once decompressed, an archive without a statistics file. Such a run stays readable by id (the uploader's
# `--wait` reads why it failed) but is not listed among the runs.
NEVER_HELD_A_LOG = ("NotAnArchive", "EmptyUpload", "NoStatsFile")

# Failures that are the service's, not the upload's: the same bytes may well succeed next time.
RETRY_ERRORS = ("InternalError", "InsufficientStorage", "UploadMissing")


def needs_its_bytes_again(run: Run, store: ArchiveStore) -> bool:
    """A run that another upload of the same bytes should re-queue instead of answering as it is."""
    if run.status == RunStatus.failed and (run.error or "").split(":", 1)[0] in RETRY_ERRORS:
        return True
    # A run left behind without its upload (by an older version, or a crash) can never finish on its own.
    return run.status in (RunStatus.queued, RunStatus.failed) and not (
        run.upload_path and store.exists(run.upload_path)
    )


def _store_upload_file(
    session: Session, data_dir: Path, store: ArchiveStore, run_id: int, upload: ReceivedUpload
) -> str:
    relative = (Path("runs") / str(run_id) / "upload.bin").as_posix()
    _remove_on_rollback(session, store, f"runs/{run_id}")
    (data_dir / relative).parent.mkdir(parents=True, exist_ok=True)
    store.put_file(upload.path, relative)
    return relative


def _remove_on_rollback(session: Session, store: ArchiveStore, prefix: str) -> None:
    """Delete `prefix` from the store if this session's transaction ends without committing."""
    committed = False

    def on_commit(_session: Session) -> None:
        nonlocal committed
        committed = True

    def on_end(_session: Session, transaction: SessionTransaction) -> None:
        # The end of the outermost transaction without a commit: rolled back, or closed after a failed commit
        # (session_scope closes the session without an explicit rollback when commit() itself raises).
        if transaction.parent is None and not committed:
            store.delete_prefix(prefix)

    event.listen(session, "after_commit", on_commit)
    event.listen(session, "after_transaction_end", on_end)


def run_read(run: Run, *, with_report: bool = False) -> RunRead:
    # Stored text and JSON go out through displayable(): a run that exists always serializes (issue 9 item 1),
    # even one stored before the edge checks in service/limits.py existed.
    shown = _shown_text
    report = displayable_json(run.ingest_report) if with_report and run.ingest_report is not None else None
    return RunRead(
        id=run.id,
        name=shown(run.name),
        project=shown(run.project),
        tags=[shown(t) for t in tags_of(run)],
        status=run.status,
        error=shown(run.error),
        sha256=run.sha256,
        upload_filename=shown(run.upload_filename),
        upload_bytes=run.upload_bytes,
        metadata=_shown_metadata(run.run_metadata),
        created_at=run.created_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
        ranks=run.rank_count,
        layer_count=run.layer_count,
        series_count=run.series_count,
        points=run.point_count,
        iteration_min=run.iteration_min,
        iteration_max=run.iteration_max,
        lines_read=run.lines_read,
        lines_skipped=run.lines_skipped,
        lines_blank=run.lines_blank,
        lines_duplicated=run.lines_duplicated,
        ingest_report=report,
        uploaded_by=run.uploaded_by,
        notes=shown(run.notes),
    )


def _shown_text(text: str | None) -> str | None:
    return None if text is None else displayable(text)


def _shown_metadata(metadata: object) -> dict[str, Any]:
    shown = displayable_json(metadata) if metadata else {}
    return shown if isinstance(shown, dict) else {"value": shown}


def get_run(session: Session, run_id: int) -> Run:
    limits.check_run_id(run_id)
    run = RunRepository(session).get(run_id)
    if run is None:
        raise NotFound(f"run {run_id} does not exist")
    return run


def get_ready_run(session: Session, run_id: int) -> Run:
    run = get_run(session, run_id)
    if run.status != RunStatus.ready:
        detail = f"run {run_id} is {run.status}"
        raise NotReady(f"{detail}: {run.error}" if run.error else f"{detail}; try again when it is ready")
    return run


def list_runs(
    session: Session,
    *,
    project: str | None,
    status: RunStatus | None,
    tag: str | None,
    cursor: str | None,
    limit: int,
) -> tuple[RunList, list[int]]:
    """A page of runs with their stored summaries, and the ready runs on it whose summary is still to compute."""
    limits.check_filters(project=project, tag=tag)
    after = limits.parse_cursor(cursor)
    runs = RunRepository(session).list(
        project=project, status=status, tag=tag, after_id=after, limit=limit + 1, unlisted_errors=NEVER_HELD_A_LOG
    )
    page, more = runs[:limit], len(runs) > limit
    items = [run_read(r) for r in page]
    summaries = SummaryRepository(session).fresh([r.id for r in page if r.status == RunStatus.ready], POLICY_VERSION)
    for item in items:
        stored = summaries.get(item.id)
        if stored is not None:
            item.summary = RunSummaryRead(
                severity=stored.severity,
                pattern=stored.pattern,
                label=pattern_label(stored.pattern),
                headline=stored.headline,
                to_bf16=stored.to_bf16,
                gemm_overrides=stored.gemm_overrides,
                policy_version=stored.policy_version,
            )
    missing = [item.id for item in items if item.status == RunStatus.ready and item.summary is None]
    return RunList(items=items, next_cursor=str(page[-1].id) if more and page else None), missing


def edit_run(session: Session, run_id: int, edit: RunEdit) -> RunRead:
    """Replace a run's notes and/or tags (those `edit` sets): both checked before anything is written, one
    transaction, the run's row locked first as every writer does (a run deleted meanwhile is 404)."""
    limits.check_run_id(run_id)
    notes = limits.check_notes(edit.notes) if "notes" in edit.model_fields_set else None
    tags = limits.check_tags(edit.tags) if edit.tags is not None else None
    run = RunRepository(session).lock(run_id, "write")
    if run is None:
        raise NotFound(f"run {run_id} does not exist")
    if "notes" in edit.model_fields_set:
        run_edits.set_notes(session, run, notes)
    if tags is not None:
        run_edits.replace_tags(session, run, tags)
    return run_read(run, with_report=True)


def pattern_label(pattern: str | None) -> str | None:
    """The human name of a stored pattern string ("u_shape" -> "U-shape"); the string itself if unknown."""
    if pattern is None:
        return None
    try:
        return Pattern(pattern).label
    except ValueError:
        return pattern


def delete_run(session: Session, data_dir: Path, run_id: int, store: ArchiveStore | None = None) -> None:
    """Delete the run and all its rows in one transaction, then its files once that has committed.

    The run's row is locked first (RunRepository.lock): an ingest job or live append in the middle of a write
    finishes it first (delete waits), and one that comes later finds the run gone and stops (LeaseLost, 404).
    Files go only after the commit: a delete that fails leaves the run whole, archive and received logs included."""
    limits.check_run_id(run_id)
    repo = RunRepository(session)
    run = repo.lock(run_id, "delete")
    if run is None:
        raise NotFound(f"run {run_id} does not exist")
    repo.delete(run)
    store = store or ArchiveStore(str(data_dir))

    def remove_files() -> None:
        store.delete_prefix(f"runs/{run_id}")
        shutil.rmtree(data_dir / "live" / str(run_id), ignore_errors=True)  # a live run's received logs

    _after_commit(session, remove_files)


def _after_commit(session: Session, action: Callable[[], None]) -> None:
    """Run `action` once this session's transaction has committed (never when it rolls back). The commit has
    happened by then: a failing `action` is logged, not raised."""
    armed = True

    def on_commit(_session: Session) -> None:
        nonlocal armed
        if armed:
            armed = False
            try:
                action()
            except Exception:
                log.exception("after the commit of a run's delete: removing its files failed")

    def on_rollback(_session: Session) -> None:
        nonlocal armed
        armed = False

    event.listen(session, "after_commit", on_commit)
    event.listen(session, "after_rollback", on_rollback)


def layers_of(session: Session, run_id: int, rank: int | None) -> list[LayerRead]:
    get_ready_run(session, run_id)
    limits.check_rank(rank)
    repo = RunRepository(session)
    stats: dict[int, list[StatSummary]] = {}
    for row in repo.layer_summaries(run_id, rank):
        stats.setdefault(row.layer_id, []).append(
            StatSummary(
                tensor=row.tensor,
                stat=row.stat_key,
                base_stat=row.stat,
                recipe=row.recipe,
                columnwise=row.columnwise,
                min=row.min,
                max=row.max,
                mean=row.mean,
                last=row.last,
                p95=row.p95,
                count=row.count,
                nan_count=row.nan_count,
                inf_count=row.inf_count,
                ranks=row.ranks,
            )
        )
    return [
        LayerRead(
            name=layer.name,
            group=layer.group,
            index=layer.layer_index,
            sublayer=layer.sublayer,
            precision=layer.precision,
            fp8={"fp8": True, "high": False}.get(layer.precision),
            has_fp8_stats=layer.has_fp8_stats,
            plans=layer.plans,
            stats=stats.get(layer.id, []),
        )
        for layer in repo.layers(run_id)
    ]


def series_of(session: Session, run_id: int, *, layer: str, tensor: str, stat: str, rank: int | None) -> SeriesRead:
    get_ready_run(session, run_id)
    limits.check_rank(rank)
    limits.check_filters(layer=layer, tensor=tensor, stat=stat)
    rows = RunRepository(session).series(run_id, layer=layer, tensor=tensor, stat_key=stat, rank=rank)
    if not rows:
        where = f" on rank {rank}" if rank is not None else ""
        raise NotFound(f"run {run_id} has no series {layer!r} / {tensor!r} / {stat!r}{where}")
    points = [
        SeriesPoints(
            rank=s.rank,
            iterations=decode_iterations(s.iterations).tolist(),
            values=json_values(decode_values(s.values)),
        )
        for s, _layer in rows
    ]
    return SeriesRead(layer=layer, tensor=tensor, stat=stat, series=points)


def json_values(values: np.ndarray) -> list[Any]:
    out: list[Any] = values.tolist()
    if not np.isfinite(values).all():
        for k in np.flatnonzero(~np.isfinite(values)).tolist():
            out[k] = nonfinite_text(float(values[k]))
    return out


def csv_rows(factory: sessionmaker[Session], run_id: int, layout: str, rank: int | None) -> Iterator[bytes]:
    """The metrics CSV, generated series by series with its own session (the response streams it) in pieces of
    about a megabyte: the rows are written by policy.csv_export's compiled writer."""
    yield csv_export.header(layout)
    pending: list[bytes] = []
    size = 0
    with session_scope(factory) as session:
        for r, layer, tensor, recipe, stat_key, its, vals in RunRepository(session).iter_points(run_id, rank):
            prefix = csv_export.row_prefix(layout, r, layer, tensor, recipe, stat_key)
            for piece in csv_export.series_rows(prefix, its, vals):
                pending.append(piece)
                size += len(piece)
                if size >= csv_export.CHUNK_BYTES:
                    yield b"".join(pending)
                    pending, size = [], 0
    if pending:
        yield b"".join(pending)
