"""Overload is not a bug: when no pooled database connection frees up within `db_pool_timeout`, the request is
answered 503 `{"error": "DatabaseBusy", ...}` with `Retry-After` instead of the generic 500 (SQLAlchemy raises
`sqlalchemy.exc.TimeoutError` from `QueuePool`, https://docs.sqlalchemy.org/en/20/errors.html#error-3o7r)."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import TimeoutError as PoolTimeout

log = logging.getLogger("fp8_policy.transport")
RETRY_AFTER_SECONDS = 5


def install_overload_handlers(app: FastAPI) -> None:
    async def pool_timeout(_request: Request, exc: Exception) -> JSONResponse:
        log.warning("no database connection free: %s", exc)
        return JSONResponse(
            {"error": "DatabaseBusy", "detail": "every database connection is in use; retry in a few seconds"},
            status_code=503,
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )

    app.add_exception_handler(PoolTimeout, pool_timeout)
