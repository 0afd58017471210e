"""HTTP routes of live runs: create, append log bytes at an offset, read files and events, finalize."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import IntegrityError

from fp8_policy._lazy import lazy_module
from fp8_policy.db.live import StoredEvent
from fp8_policy.db.session import session_scope
from fp8_policy.service.auth.deps import READ, UPLOAD, PrincipalDep
from fp8_policy.service.deps import SessionDep, SettingsDep
from fp8_policy.service.limits import MAX_ROW_ID
from fp8_policy.service.live import reads
from fp8_policy.service.live.pieces import Piece, new_part_path, received_piece
from fp8_policy.service.live.schemas import AppendRead, EventsPageRead, LiveEventRead, LiveRunCreate, LiveRunRead
from fp8_policy.service.openapi import error_responses
from fp8_policy.service.runs.actions import get_run, run_read
from fp8_policy.service.runs.schemas import RunRead

if TYPE_CHECKING:
    from fp8_policy.service.live import actions
else:  # imported on first use (the parser, the live events): start-up path, tests/service/app/test_start_up_imports.py
    actions = lazy_module("fp8_policy.service.live.actions")

router = APIRouter(prefix="/api/v1/live/runs", tags=["live"])
MAX_PIECE_BYTES = 64 * 1024**2


def _event_read(stored: StoredEvent) -> LiveEventRead:
    return LiveEventRead(id=stored.id, created_at=stored.created_at, **stored.event.to_dict())


@router.post("", status_code=201, response_model=RunRead, dependencies=[UPLOAD], responses=error_responses(400))
def create_live_run(body: LiveRunCreate, session: SessionDep, principal: PrincipalDep) -> RunRead:
    """Start a live run: its logs arrive piece by piece (`PUT .../files/{path}`) while the job trains."""
    run = actions.create_live_run(session, body.model_dump(), principal.name)
    return run_read(run)


@router.put(
    "/{run_id}/files/{path:path}",
    response_model=AppendRead,
    dependencies=[UPLOAD],
    responses=error_responses(400, 404, 409, 413, 503),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def append(
    run_id: int,
    path: str,
    request: Request,
    settings: SettingsDep,
    principal: PrincipalDep,
    offset: Annotated[
        int,
        Query(
            ge=0,
            le=2**62,
            description="Byte offset of this piece in the file: the `size` "
            "the previous answer gave (0 for a new file). A gap is refused with 409 and the "
            "expected offset in `Upload-Offset`.",
        ),
    ],
) -> AppendRead:
    """Append the raw body to the run's log file `path` (as in an archive, e.g.
    `rank_0/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log`, or `scalars.jsonl`) at `offset`.
    Re-sending bytes already received is harmless; new whole lines of a statistics log are checked for early
    warnings at once. Only the token that started the run appends to it (403 `NotRunOwner` for any other)."""

    def store(body: Piece) -> AppendRead:
        with session_scope(request.app.state.session_factory) as session:
            result = actions.append(session, settings.data_dir, run_id, path, offset, body, caller=principal)
            answer = AppendRead(path=result.path, size=result.size, events=[_event_read(e) for e in result.events])
        if result.alerts_queued:  # committed: the sender may take them now
            request.app.state.alerts.wake()
        return answer

    # the body goes to a file as it arrives, pieces at once are capped (503 TooManyPieces), and their disk and
    # parse work runs in the piece gate's few threads: memory stays bounded (service/live/pieces.py)
    uploads = settings.data_dir / "uploads"
    async with (
        request.app.state.live_pieces.slot() as limiter,
        received_piece(request, new_part_path(uploads), MAX_PIECE_BYTES, limiter) as piece,
    ):
        return await anyio.to_thread.run_sync(store, piece, limiter=limiter)


@router.get("/{run_id}", response_model=LiveRunRead, dependencies=[READ], responses=error_responses(400, 404))
def read_live_run(
    run_id: int,
    session: SessionDep,
    after: Annotated[
        int, Query(ge=0, le=MAX_ROW_ID, description="Only events with a larger id (poll with the last id seen).")
    ] = 0,
) -> LiveRunRead:
    """A live (or finalized) run's received files and its early-warning events."""
    run = get_run(session, run_id)
    files = [
        {"path": f.path, "kind": f.kind, "size": f.size, "parsed_offset": f.parsed_offset}
        for f in reads.received_files(session, run_id)
    ]
    return LiveRunRead(
        run_id=run_id,
        status=run.status,
        files=files,
        events=[_event_read(e) for e in reads.events_after(session, run_id, after)],
    )


@router.post(
    "/{run_id}/finalize",
    status_code=202,
    response_model=RunRead,
    dependencies=[UPLOAD],
    responses=error_responses(400, 404, 409),
)
def finalize(run_id: int, request: Request, settings: SettingsDep, principal: PrincipalDep) -> JSONResponse:
    """The job finished: pack the received logs and ingest them like an upload (the run goes `queued` →
    `ready` or `failed`, with the same series and counts as the whole logs uploaded at once). The token that
    started the run, or an admin token, finalizes it (403 `NotRunOwner` for any other)."""
    state = request.app.state
    for attempt in (1, 2):
        try:
            with session_scope(state.session_factory) as session:  # committed before the ingest job is queued
                run = actions.finalize(session, settings.data_dir, state.ingest.store, run_id, caller=principal)
                body = run_read(run).model_dump(mode="json")
            break
        except IntegrityError:
            # Another run of the project took the same bytes' hash at the same moment (an upload, or a live run
            # with the same logs finalized concurrently): once again, the hash is then seen and not claimed.
            if attempt == 2:
                raise
    state.ingest.submit(run_id)
    actions.remove_received_logs(settings.data_dir, run_id)
    return JSONResponse(body, status_code=202, headers={"Location": f"/api/v1/runs/{run_id}"})


@router.get("/{run_id}/events", response_model=EventsPageRead, dependencies=[READ], responses=error_responses(400, 404))
def read_events(
    run_id: int,
    session: SessionDep,
    before: Annotated[
        int | None,
        Query(ge=1, le=MAX_ROW_ID, description="Only events with a smaller id (the previous page's last id)."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=reads.MAX_EVENTS_PAGE, description="Events per page.")] = 50,
) -> EventsPageRead:
    """The early warnings a live run raised, newest first, a page at a time; they stay after finalize. Each
    event stands for one (layer, kind) of one received piece: `detail.members` lists the series it groups."""
    get_run(session, run_id)
    total, page, older = reads.events_page(session, run_id, before, limit)
    return EventsPageRead(
        run_id=run_id,
        total=total,
        events=[_event_read(e) for e in page],
        next_before=page[-1].id if older else None,
    )
