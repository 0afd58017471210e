"""Stored uploads without a run: `runs/<id>/upload.bin` files whose run row was never committed, swept at start-up.

An upload is moved from its `.part` file to `runs/<id>/upload.bin` inside the transaction that adds the run row
(service/runs/actions.py); a process killed between the move and the commit (kill -9, OOM) leaves the file with
no row, and since run ids are never reused (`sqlite_autoincrement`, PostgreSQL sequences) nothing would ever
replace or delete it. Every API process sweeps them when it starts.

Another process may be inside that window right now, on the same archive directory. It holds the exclusive
`flock` it received the file under until its transaction has ended (`ReceivedUpload.held`,
service/ingest/upload.py), and the lock moves with the file (a rename keeps the inode). The sweep takes the same lock first and only then asks
whether the row exists, so it never removes a file whose row is about to be committed. Only local archive
stores are swept (a remote store has no locks); the uploads directory and the archive must be on one
filesystem for the lock to move with the file, as they are by default (both under the data directory).
"""

from __future__ import annotations

import fcntl
import logging
from contextlib import ExitStack
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from fp8_policy.db.runs import RunRepository
from fp8_policy.db.session import session_scope
from fp8_policy.service.storage import keys
from fp8_policy.service.storage.archive import ArchiveStore

log = logging.getLogger("fp8_policy.storage")

BATCH = 500  # files locked at once while their rows are looked up


def sweep_orphan_uploads(store: ArchiveStore, factory: sessionmaker[Session]) -> list[int]:
    """Remove `runs/<id>/` folders holding an unlocked `upload.bin` and no run row; returns the run ids."""
    if not store.local:
        return []
    runs = store.root / keys.RUNS_FOLDER
    candidates = sorted(
        (int(folder.name), folder / keys.UPLOAD_NAME)
        for folder in (runs.iterdir() if runs.is_dir() else [])
        if folder.name.isascii()
        and folder.name.isdigit()
        and len(folder.name) < 12
        and (folder / keys.UPLOAD_NAME).is_file()
    )
    removed: list[int] = []
    for start in range(0, len(candidates), BATCH):
        with ExitStack() as locks:
            held = [run_id for run_id, path in candidates[start : start + BATCH] if _try_lock(locks, path)]
            if not held:
                continue
            with session_scope(factory) as session:
                existing = RunRepository(session).existing_ids(held)
            for run_id in held:
                if run_id not in existing:
                    store.delete_prefix(keys.run_prefix(run_id))
                    removed.append(run_id)
    if removed:
        log.warning("removed %d stored upload(s) without a run: runs %s", len(removed), removed[:20])
    return removed


def _try_lock(locks: ExitStack, path: Path) -> bool:
    try:
        handle = locks.enter_context(open(path, "rb"))  # noqa: SIM115 - closed by the ExitStack
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # being stored by a live process right now
        return False
    return True
