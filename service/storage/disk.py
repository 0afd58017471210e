"""A full disk is the server's problem: 507 for the client, nothing left behind, and `.part` files swept.

Belongs here: recognising "out of space" (ENOSPC / EDQUOT from the OS, SQLite's "database or disk is full",
PostgreSQL's SQLSTATE 53100 disk_full), the InsufficientStorage error (507, RFC 4918 §11.5) and its exception
handlers, and the `.part` files uploads are received into: each is held under an exclusive `flock` while its
upload is received, so the start-up sweep removes exactly the ones whose process is gone (kill -9 included:
the kernel drops the lock with the process), never a live upload of another process on the same data
directory. Must not be here: receiving bodies (service/ingest/upload.py), retrying runs (service/runs).
"""

from __future__ import annotations

import errno
import fcntl
import logging
from pathlib import Path
from typing import IO

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError

from fp8_policy.service.errors import InsufficientStorage, internal_error

log = logging.getLogger("fp8_policy.storage")

PART_SUFFIX = ".part"
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_PG_DISK_FULL = "53100"  # https://www.postgresql.org/docs/current/errcodes-appendix.html


def is_out_of_space(exc: BaseException) -> bool:
    """True for the OS's ENOSPC / EDQUOT and the databases' own "disk full" errors (also when wrapped)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _FULL_ERRNOS:
            return True
        if isinstance(current, DBAPIError) and current.orig is not None:
            orig = current.orig
            if getattr(orig, "sqlite_errorcode", None) == 13 or "database or disk is full" in str(orig):  # SQLITE_FULL
                return True
            if getattr(orig, "sqlstate", None) == _PG_DISK_FULL or getattr(orig, "pgcode", None) == _PG_DISK_FULL:
                return True
        current = current.__cause__ or current.__context__
    return False


def out_of_space(exc: BaseException) -> InsufficientStorage:
    return InsufficientStorage(f"the service ran out of disk space ({type(exc).__name__}); try again later")


def install_storage_handlers(app: FastAPI) -> None:
    """OSError and database errors that mean "disk full" answer 507; any other stays the generic 500."""

    async def handler(_request: Request, exc: Exception) -> JSONResponse:
        if is_out_of_space(exc):
            log.error("out of disk space: %s", exc)
            error = out_of_space(exc)
            return JSONResponse({"error": error.error, "detail": error.detail}, status_code=error.status_code)
        log.exception("unexpected %s", type(exc).__name__, exc_info=exc)
        return internal_error(exc)

    app.add_exception_handler(OSError, handler)
    app.add_exception_handler(DBAPIError, handler)


# --- .part files ---------------------------------------------------------------------------------------------


def hold_part(handle: IO[bytes]) -> None:
    """Mark a `.part` file as being received by this process (released when it is closed or the process dies)."""
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


def sweep_stale_parts(upload_dir: Path) -> list[str]:
    """Remove the `.part` files no live process holds (left by a killed or crashed upload); returns their names."""
    removed: list[str] = []
    if not upload_dir.is_dir():
        return removed
    for path in upload_dir.glob(f"*{PART_SUFFIX}"):
        try:
            with open(path, "rb") as handle:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                path.unlink(missing_ok=True)  # still holding the lock: no upload can be writing to it
            removed.append(path.name)
        except BlockingIOError:
            continue  # an upload in progress (this or another process)
        except FileNotFoundError:
            continue
    if removed:
        log.warning("removed %d stale upload file(s) in %s", len(removed), upload_dir)
    return removed
