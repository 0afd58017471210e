"""Use cases that write a run's bytes and files: storing an upload as a new queued run (or answering with the run
that already holds the same bytes, re-queued when its ingest should run again), and deleting a run with its files.

Belongs here: the rules of an upload's fields and name, where its bytes go in the archive store, and the transaction
hooks that keep files and rows in step (a rolled-back upload leaves no file, a delete removes files only once it
has committed). Reads of runs (one, a page, layers, series, CSV) and notes/tags edits are service/runs/actions.py;
an explicit retry is service/runs/retry.py.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, SessionTransaction

from fp8_policy.db.jobs import JobRepository
from fp8_policy.db.run_models import Run, RunStatus
from fp8_policy.db.runs import NewRun, RunRepository
from fp8_policy.service import limits
from fp8_policy.service.errors import NotFound
from fp8_policy.service.ingest.junk import never_held_a_log
from fp8_policy.service.ingest.upload import ReceivedUpload
from fp8_policy.service.storage import keys
from fp8_policy.service.storage.archive import ArchiveStore

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
        name = limits.check_label("name", name, limits.MAX_NAME_CHARS)
    project = limits.check_label("project", project, limits.MAX_NAME_CHARS)
    tags = limits.check_tags((fields.get("tags") or "").split(","))
    return name, project, tags, limits.parse_metadata(fields.get("metadata"))


@dataclass(frozen=True, slots=True)
class StoredUpload:
    """What an upload became: `run`, whether it needs an ingest job (`queued`), and whether the project already
    held these bytes (`duplicate`: `run` is that earlier run, under its own name, tags and metadata)."""

    run: Run
    queued: bool
    duplicate: bool


def store_upload(
    session: Session,
    data_dir: Path,
    upload: ReceivedUpload,
    fields: dict[str, str],
    uploaded_by: str | None = None,
    store: ArchiveStore | None = None,
    *,
    add_job: bool = False,
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

    `add_job`: a run that is `queued` gets its ingest's first job in this same transaction (one SQLite write
    lock for the row, the file and the job, instead of a second transaction for the job after this one: under
    mixed load each wait for the write lock cost an upload hundreds of ms, issue 20); the caller then only wakes
    the workers. Without it the caller queues the job itself (IngestWorker.submit).
    """
    name, project, tags, metadata = parse_upload_fields(fields, upload.filename)
    filename = limits.clean_filename(upload.filename)
    store = store or ArchiveStore(str(data_dir))
    repo = RunRepository(session)
    existing = repo.find_by_hash(project, upload.sha256)
    if existing is not None:
        run, queued = _same_bytes_again(session, data_dir, store, existing, upload)
        if queued and add_job:
            JobRepository(session).enqueue_plan(run.id)  # the earlier ingest's jobs are finished or gone
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
    if add_job:
        JobRepository(session).add_plan(run.id)
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


# Failures that are the service's, not the upload's: the same bytes may well succeed next time.
RETRY_ERRORS = ("InternalError", "InsufficientStorage", "UploadMissing")


def needs_its_bytes_again(run: Run, store: ArchiveStore) -> bool:
    """A run that another upload of the same bytes should re-queue instead of answering as it is."""
    if run.status == RunStatus.failed and (run.error or "").split(":", 1)[0] in RETRY_ERRORS:
        return True
    if run.status == RunStatus.failed and never_held_a_log(run.error):
        return False  # its bytes were deleted when it failed (service/ingest/junk.py): they can never be a run
    # A run left behind without its upload (by an older version, or a crash) can never finish on its own.
    return run.status in (RunStatus.queued, RunStatus.failed) and not (
        run.upload_path and store.exists(run.upload_path)
    )


def _store_upload_file(
    session: Session, data_dir: Path, store: ArchiveStore, run_id: int, upload: ReceivedUpload
) -> str:
    relative = keys.upload_key(run_id)
    _remove_on_rollback(session, store, keys.run_prefix(run_id))
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
        store.delete_prefix(keys.run_prefix(run_id))
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
