"""HTTP route of a run's training scalars: `GET /api/v1/live/runs/{run_id}/scalars` (live, finalized or uploaded)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from fp8_policy.service.auth.deps import READ
from fp8_policy.service.deps import SessionDep, SettingsDep
from fp8_policy.service.openapi import error_responses
from fp8_policy.service.runs.actions import get_run
from fp8_policy.service.scalars import actions
from fp8_policy.service.scalars.schemas import ScalarsRead

router = APIRouter(prefix="/api/v1/live/runs", tags=["live"])


@router.get("/{run_id}/scalars", response_model=ScalarsRead, dependencies=[READ], responses=error_responses(400, 404))
def read_scalars(
    run_id: int,
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    limit: Annotated[int, Query(ge=1, le=100_000, description="The last this many scalar records.")] = 20_000,
) -> ScalarsRead:
    """The training scalars of the run (`scalars.jsonl`: loss, grad_norm, ...) as series per name: those a live
    run streamed, while it is live and after it is finalized, and those an uploaded archive carried (its
    `scalars.jsonl` member, kept at ingest; `ingest_report.scalars` says what was kept). None: `records` 0."""
    run = get_run(session, run_id)
    store = request.app.state.ingest.store
    return ScalarsRead(run_id=run_id, **actions.scalar_series(store, settings.data_dir, run, limit))
