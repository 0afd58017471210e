"""HTTP route of a run's early-warning timeline, paged: `GET /api/v1/live/runs/{run_id}/events` (live or finished)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from fp8_policy.service.auth.deps import READ
from fp8_policy.service.deps import SessionDep
from fp8_policy.service.limits import MAX_ROW_ID
from fp8_policy.service.live import story
from fp8_policy.service.live.schemas import LiveEventRead
from fp8_policy.service.openapi import error_responses
from fp8_policy.service.runs.actions import get_run

router = APIRouter(prefix="/api/v1/live/runs", tags=["live"], dependencies=[READ])


class EventsPageRead(BaseModel):
    run_id: int
    total: int = Field(description="Every event the run raised while it was live.")
    events: list[LiveEventRead] = Field(description="This page, newest first (ids descending).")
    next_before: int | None = Field(description="Pass as `before` for the next, older page; null: no older event.")


@router.get("/{run_id}/events", response_model=EventsPageRead, responses=error_responses(400, 404))
def read_events(
    run_id: int,
    session: SessionDep,
    before: Annotated[
        int | None,
        Query(ge=1, le=MAX_ROW_ID, description="Only events with a smaller id (the previous page's last id)."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=story.MAX_EVENTS_PAGE, description="Events per page.")] = 50,
) -> EventsPageRead:
    """The early warnings a live run raised, newest first, a page at a time; they stay after finalize. Each
    event stands for one (layer, kind) of one received piece: `detail.members` lists the series it groups."""
    get_run(session, run_id)
    total, page, older = story.events_page(session, run_id, before, limit)
    return EventsPageRead(
        run_id=run_id,
        total=total,
        events=[LiveEventRead(id=e.id, created_at=e.created_at, **e.event.to_dict()) for e in page],
        next_before=page[-1].id if older else None,
    )
