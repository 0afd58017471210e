"""Queue the ingest of a failed run again, from its stored upload (`POST /api/v1/runs/{id}/retry`, service/runs/routes.py).

A run that failed for a server-side reason (a full disk, a crash) can be retried without deleting it; uploading
the same bytes again does the same for those reasons (service/runs/writes.py: RETRY_ERRORS). Here the user
asks explicitly, so any failed run is retried as long as its upload is still stored.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from fp8_policy.db.run_models import RunStatus
from fp8_policy.db.runs import RunRepository
from fp8_policy.service import limits
from fp8_policy.service.errors import NotFound, NotRetryable, UploadMissing
from fp8_policy.service.runs import actions
from fp8_policy.service.storage.archive import ArchiveStore


def requeue(session: Session, store: ArchiveStore, run_id: int) -> dict[str, Any]:
    """The failed run queued again, as its JSON body (404 unknown, 409 NotRetryable or UploadMissing)."""
    # The run's row is locked first (RunRepository.lock): a delete racing the retry waits for it, or has
    # committed and the run is not found (404), never a 500 from requeueing a row that is gone.
    limits.check_run_id(run_id)
    run = RunRepository(session).lock(run_id, "write")
    if run is None:
        raise NotFound(f"run {run_id} does not exist")
    if run.status != RunStatus.failed:
        raise NotRetryable(f"run {run_id} is {run.status}; only a failed run can be retried")
    if not (run.upload_path and store.exists(run.upload_path)):
        raise UploadMissing(f"the upload of run {run_id} is no longer stored; upload the same bytes again to retry it")
    RunRepository(session).requeue_failed(run_id, upload_path=run.upload_path)
    session.refresh(run)
    return actions.run_read(run).model_dump(mode="json")
