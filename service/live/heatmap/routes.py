"""HTTP route of a live run's growing heatmap: `GET /api/v1/live/runs/{run_id}/heatmap.json`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter, Request

from fp8_policy._lazy import lazy_module
from fp8_policy.service.auth.deps import READ
from fp8_policy.service.deps import SessionDep, SettingsDep
from fp8_policy.service.errors import NotLive
from fp8_policy.service.live import reads
from fp8_policy.service.live.heatmap.actions import LiveHeatmaps
from fp8_policy.service.live.heatmap.schemas import LiveHeatmapRead
from fp8_policy.service.openapi import error_responses
from fp8_policy.service.runs.actions import get_run
from fp8_policy.service.visual.params import HEATMAP_KEYS, parse_cell_columns, parse_heatmap_params
from fp8_policy.service.visual.query_docs import heatmap_json_params

if TYPE_CHECKING:
    from fp8_policy.service.live import actions
else:  # imported on first use (the parser, the live events): start-up path, tests/service/app/test_start_up_imports.py
    actions = lazy_module("fp8_policy.service.live.actions")

router = APIRouter(prefix="/api/v1/live/runs", tags=["live"], dependencies=[READ])
live_heatmaps = LiveHeatmaps()


@router.get(
    "/{run_id}/heatmap.json",
    response_model=LiveHeatmapRead,
    responses=error_responses(400, 404, 409),
    openapi_extra={"parameters": heatmap_json_params()},
)
def live_heatmap_json(run_id: int, request: Request, session: SessionDep, settings: SettingsDep) -> LiveHeatmapRead:
    """The heatmap of a `live` run so far, with the parameters of `GET /api/v1/runs/{run_id}/heatmap.json`
    (`cells=N` for the values). Only new whole lines are parsed per poll; an unchanged run is answered from
    memory. 400 `NoData` until the statistics of the tensor and stat have arrived; 409 `NotLive` once the run
    is finalized (its stored heatmap.json takes over)."""
    params = parse_heatmap_params(request.query_params, show_skip=False, allowed=HEATMAP_KEYS | {"cells"})
    columns = parse_cell_columns(request.query_params)
    run = get_run(session, run_id)
    if run.status != actions.LIVE:
        live_heatmaps.forget(run_id)
        raise NotLive(
            f"run {run_id} is {run.status}, not live: its heatmap is GET /api/v1/runs/{run_id}/heatmap.json",
        )
    files = reads.received_files(session, run_id)
    root = actions.live_dir(settings.data_dir, run_id)
    layout = live_heatmaps.layout(run_id, str(run.created_at), root, files, params, columns, run.run_metadata)
    return LiveHeatmapRead.model_validate(layout)
