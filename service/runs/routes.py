"""HTTP routes for runs: upload, status, listing, editing (notes, tags), deletion, layers, series and CSV export."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import anyio
from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.datastructures import State

from fp8_policy.db.run_models import RunStatus
from fp8_policy.service.auth.deps import ADMIN, READ, UPLOAD, PrincipalDep
from fp8_policy.service.deps import SessionDep, SettingsDep
from fp8_policy.service.errors import ErrorBody
from fp8_policy.service.ingest.upload import ReceivedUpload, new_upload_path, receive_upload
from fp8_policy.service.limits import check_rank
from fp8_policy.service.openapi import error_responses
from fp8_policy.service.runs import actions, retry, writes
from fp8_policy.service.runs.facets import FACET_HELP, facet_filters
from fp8_policy.service.runs.schemas import (
    DuplicateOf,
    LayerRead,
    RunEdit,
    RunList,
    RunRead,
    RunUploaded,
    SeriesRead,
)
from fp8_policy.service.runs.upload_docs import UPLOAD_OPENAPI
from fp8_policy.service.settings import Settings
from fp8_policy.service.transport.uploads import upload_client

router = APIRouter(prefix="/api/v1/runs", tags=["runs"])

RANK_QUERY = (
    "One rank; default: every rank stored. A data-parallel replica stored once answers with the rank it repeats."
)

ERRORS = error_responses(400, 404, 409)
StatusFilter = RunStatus


@router.post(
    "",
    status_code=202,
    openapi_extra=UPLOAD_OPENAPI,
    dependencies=[UPLOAD],
    response_model=RunUploaded,
    responses={
        200: {
            "model": RunUploaded,
            "description": "The same bytes were already uploaded to this project: that run, with `duplicate_of`.",
        },
        400: {"model": ErrorBody},
        408: {"model": ErrorBody},
        413: {"model": ErrorBody},
        415: {"model": ErrorBody},
        503: {"model": ErrorBody, "description": "Too many uploads at once; retry after `Retry-After` seconds."},
    },
)
async def create_run(request: Request, settings: SettingsDep, principal: PrincipalDep) -> JSONResponse:
    """Upload an `fp8_log_dir` archive (tar, tar.gz, zip) or one statistics log (.log, .log.gz).

    Send multipart/form-data with a `file` part and optional `name`, `project`, `tags` (comma-separated)
    and `metadata` (a JSON object: model dims, GPU arch, recipe, ...) fields, or a raw body with
    Content-Type application/gzip, application/x-tar, application/zip or text/plain and the same fields
    as query parameters. Without a `name`, the file name less its archive suffix names the run. A new run
    answers 202 and is ingested in the background; identical bytes in the same project answer 200 with the
    existing run and `duplicate_of` (its id and name): nothing is stored twice, this upload's name is not applied.
    """
    # async only to stream the body; everything blocking (disk, hashing, database) runs in the upload gate's
    # worker threads, never on the event loop (issue 9 item 6)
    async with request.app.state.upload_gate.slot(upload_client(request, principal.name)) as limiter:
        upload = await receive_upload(
            request, new_upload_path(settings.data_dir / "uploads"), settings.max_upload_bytes, limiter
        )
        try:
            fields = {k: v for k, v in request.query_params.items() if k in ("name", "project", "tags", "metadata")}
            fields.update(upload.fields)
            body, created = await anyio.to_thread.run_sync(
                _store_upload, request.app.state, settings, upload, fields, principal.name, limiter=limiter
            )
        finally:
            upload.release()
    headers = {"Location": f"/api/v1/runs/{body['id']}"}
    return JSONResponse(body, status_code=202 if created else 200, headers=headers)


def _store_upload(
    state: State, settings: Settings, upload: ReceivedUpload, fields: dict[str, str], uploaded_by: str | None
) -> tuple[dict[str, Any], bool]:
    """The blocking part of an upload (in a worker thread): store the run, queue its ingest."""
    try:
        with state.unit_of_work() as session:
            stored = writes.store_upload(
                session, settings.data_dir, upload, fields, uploaded_by, store=state.ingest.store, add_job=True
            )
            read = actions.run_read(stored.run)
            duplicate = DuplicateOf(id=read.id, name=read.name) if stored.duplicate else None
            body = RunUploaded(**read.model_dump(), duplicate_of=duplicate).model_dump(mode="json")
    finally:
        upload.path.unlink(missing_ok=True)
        upload.release()  # the transaction has ended: the orphan sweep (service/runs/orphans.py) may judge the file
    if stored.queued:
        state.ingest.wake()  # its job was queued with the run, in the same transaction
    return body, stored.queued


@router.get("", response_model=RunList, dependencies=[READ], responses={400: {"model": ErrorBody}})
def list_runs(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    project: Annotated[str | None, Query(description="Only runs of this project.")] = None,
    status: Annotated[StatusFilter | None, Query(description="Only runs in this state.")] = None,
    tag: Annotated[str | None, Query(description="Only runs carrying this tag.")] = None,
    cursor: Annotated[str | None, Query(description="`next_cursor` of the previous page.")] = None,
    limit: Annotated[int, Query(ge=1, le=200, description="Runs per page.")] = 50,
    gpu: Annotated[str | None, Query(description=FACET_HELP["gpu"])] = None,
    recipe: Annotated[str | None, Query(description=FACET_HELP["recipe"])] = None,
    te_version: Annotated[str | None, Query(description=FACET_HELP["te_version"])] = None,
    git_commit: Annotated[str | None, Query(description=FACET_HELP["git_commit"])] = None,
) -> RunList:
    """Runs, newest first, filtered by project, status, tag and the metadata's GPU, recipe, TE version and git
    commit; follow `next_cursor` for more. Ready runs carry their stored `summary` (severity, leading finding,
    layers to BF16); one still being computed is null."""
    facets = facet_filters(gpu=gpu, recipe=recipe, te_version=te_version, git_commit=git_commit)
    page, missing = actions.list_runs(
        session,
        project=project,
        status=status,
        tag=tag,
        cursor=cursor,
        limit=min(limit, settings.page_size_max),
        facets=facets,
    )
    if missing:
        request.app.state.summaries.request(missing)  # computed in the background, never in this request
    return page


@router.get("/{run_id}", response_model=RunRead, dependencies=[READ], responses=ERRORS)
def read_run(run_id: int, session: SessionDep) -> RunRead:
    """A run's status and ingest figures (with a per-file report)."""
    return actions.run_read(actions.get_run(session, run_id), with_report=True)


@router.patch("/{run_id}", response_model=RunRead, dependencies=[UPLOAD], responses=error_responses(400, 403, 404, 409))
def edit_run(run_id: int, body: RunEdit, session: SessionDep, principal: PrincipalDep) -> RunRead:
    """Edit a run's notes, tags and training-run link: `{"notes": "...", "tags": ["a", "b"], "training_run":
    {"kind": "mlflow", "ref": "<run id>", "url": "http://..."}}`, each field optional; `tags` replaces the run's
    tags. All are checked before anything is stored (400 otherwise). The token that uploaded the run, or
    an admin token, edits it (403 `NotRunOwner` for any other, as for a live run's finalize)."""
    return actions.edit_run(session, run_id, body, principal)


@router.delete("/{run_id}", status_code=204, dependencies=[ADMIN], responses=ERRORS)
def delete_run(run_id: int, request: Request, session: SessionDep, settings: SettingsDep) -> Response:
    """Delete a run, its metrics and its uploaded archive."""
    writes.delete_run(session, settings.data_dir, run_id, store=request.app.state.ingest.store)
    return Response(status_code=204)


@router.get("/{run_id}/layers", response_model=list[LayerRead], dependencies=[READ], responses=ERRORS)
def list_layers(
    run_id: int,
    session: SessionDep,
    rank: Annotated[int | None, Query(ge=0, description=RANK_QUERY)] = None,
) -> list[LayerRead]:
    """One entry per layer in model order, with per (tensor, stat) summaries over ranks (or one rank)."""
    return actions.layers_of(session, run_id, rank)


@router.get("/{run_id}/series", response_model=SeriesRead, dependencies=[READ], responses=ERRORS)
def read_series(
    run_id: int,
    session: SessionDep,
    layer: Annotated[str, Query(description="Exact layer name as logged (see .../layers).")],
    tensor: Annotated[str, Query(description="As logged: activation, gradient, weight, ...")],
    stat: Annotated[str, Query(description="As logged after the tensor: underflows%, mxfp8_underflows%, ...")],
    rank: Annotated[int | None, Query(ge=0, description=RANK_QUERY)] = None,
) -> SeriesRead:
    """Iterations and values of one metric of one layer, per rank."""
    return actions.series_of(session, run_id, layer=layer, tensor=tensor, stat=stat, rank=rank)


@router.get(
    "/{run_id}/metrics.csv",
    response_class=Response,
    dependencies=[READ],
    responses={
        200: {
            "content": {"text/csv": {"schema": {"type": "string"}}},
            "description": "The CSV, streamed as an attachment.",
        },
        **ERRORS,
    },
)
def export_csv(
    run_id: int,
    request: Request,
    session: SessionDep,
    layout: Annotated[
        Literal["long", "bionemo"],
        Query(
            description="long: rank, layer, tensor, recipe, stat, "
            "iteration, value (a parallel job: rank, tp, pp, dp, ep, cp, layer, ...); bionemo: metric_name, "
            "iteration, value."
        ),
    ] = "long",
    rank: Annotated[int | None, Query(ge=0, description=RANK_QUERY)] = None,
) -> StreamingResponse:
    """All points as CSV, streamed: long layout (rank, layer, tensor, recipe, stat, iteration, value; a parallel
    job's ranks with their tp, pp, dp, ep, cp coordinates after `rank`) or `layout=bionemo` (metric_name, iteration,
    value). Layer names are global (a pipeline stage's blocks named by their place in the whole model)."""
    actions.get_ready_run(session, run_id)
    check_rank(rank)  # before the response starts: a bad rank is a 400, never a 200 with a cut-off body
    rows = actions.csv_rows(request.app.state.session_factory, run_id, layout, rank)
    filename = f"run_{run_id}_metrics{'_bionemo' if layout == 'bionemo' else ''}.csv"
    return StreamingResponse(
        rows, media_type="text/csv", headers={"Content-Disposition": f'attachment; filename="{filename}"'}
    )


@router.post(
    "/{run_id}/retry",
    status_code=202,
    # the scope of POST /api/v1/runs: a retry ingests again what an upload token could have sent again (same bytes
    # re-queue too)
    dependencies=[UPLOAD],
    response_model=RunRead,
    responses={
        404: {"model": ErrorBody},
        409: {
            "model": ErrorBody,
            "description": "NotRetryable (the run is not "
            "failed) or UploadMissing (upload the same bytes again instead).",
        },
    },
)
def retry_run(run_id: int, request: Request) -> JSONResponse:
    """Queue a failed run's ingest again from its stored upload: 202 with the run, now `queued`."""
    state = request.app.state
    with state.unit_of_work() as session:
        body = retry.requeue(session, state.ingest.store, run_id)
    state.ingest.submit(run_id)
    return JSONResponse(body, status_code=202, headers={"Location": f"/api/v1/runs/{run_id}"})
