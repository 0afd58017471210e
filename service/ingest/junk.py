"""Uploads that never held a log: which failures they are, and dropping their bytes once they failed.

Belongs here: the error codes of such uploads (service/ingest/archive/errors.py: not an archive nor a log, empty once
decompressed, an archive without a statistics file) and deleting the stored upload of a run that failed with one.
Such a run stays readable by id (the uploader's `--wait` reads why it failed) but is not listed among the runs
(service/runs/actions.py) and keeps no bytes: up to MAX_UPLOAD_BYTES of junk would otherwise stay on disk, unlisted,
until its run is deleted. The same bytes uploaded again answer with that failed run (service/runs/writes.py): they
can never become a run. Must not be here: recording the failure (service/ingest/pipeline.py).
"""

from __future__ import annotations

import logging

from fp8_policy.service.storage.archive import ArchiveStore

log = logging.getLogger("fp8_policy.ingest")

NEVER_HELD_A_LOG = ("NotAnArchive", "EmptyUpload", "NoStatsFile")


def never_held_a_log(error: str | None) -> bool:
    return (error or "").split(":", 1)[0] in NEVER_HELD_A_LOG


def forget_junk_upload(store: ArchiveStore, run_id: int, upload_path: str | None, error: str) -> None:
    """Delete the stored upload of a run that failed because it never held a log (nothing else is kept)."""
    if not upload_path or not never_held_a_log(error):
        return
    try:
        store.delete(upload_path)
    except Exception:  # the run is failed already; its upload goes with the run at the latest
        log.warning("run %s: its upload (no log in it) could not be deleted", run_id, exc_info=True)
