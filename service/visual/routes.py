"""HTTP routes for images: a run's heatmap (PNG, SVG, or its layout as JSON); the comparison of two runs draws its
images with the same parameters and responses (service/compare/routes.py).

Every parameter is validated by `service.visual.params`, so a bad value answers 400 `{"error", "detail"}`;
an unknown run 404, a run that is not ready 409.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from fp8_policy._lazy import lazy_module
from fp8_policy.service.auth.deps import READ
from fp8_policy.service.deps import SessionDep
from fp8_policy.service.openapi import error_responses
from fp8_policy.service.visual.params import (
    HEATMAP_KEYS,
    HeatmapParams,
    parse_cell_columns,
    parse_heatmap_params,
)
from fp8_policy.service.visual.query_docs import heatmap_json_params, heatmap_params
from fp8_policy.service.visual.schemas import HeatmapLayoutRead

if TYPE_CHECKING:
    from fp8_policy.service.visual import actions
    from fp8_policy.service.visual.job import Rendered
else:  # imported on first use: start-up path, tests/service/app/test_start_up_imports.py
    actions = lazy_module("fp8_policy.service.visual.actions")

router = APIRouter(tags=["visual"], dependencies=[READ])
ERRORS = error_responses(400, 404, 409)
_IMAGE_HEADERS = {
    "X-Heatmap-Size": "w,h of the image in pixels",
    "X-Heatmap-Extent": "x0,y0,x1,y1 pixels of the cells per panel, ';'-separated",
    "X-Heatmap-Shape": "rows,columns per panel, ';'-separated",
    "X-Heatmap-Vmax": "top of the colour scale",
}


def _image_responses(media_type: str) -> dict[int | str, dict[str, Any]]:
    headers = {name: {"description": text, "schema": {"type": "string"}} for name, text in _IMAGE_HEADERS.items()}
    image = {
        "description": "The image.",
        "headers": headers,
        "content": {media_type: {"schema": {"type": "string", "format": "binary"}}},
    }
    return {**error_responses(400, 404, 409, 429, 503), 200: image}  # 429/503: service/visual/pool.py


PNG, SVG = _image_responses("image/png"), _image_responses("image/svg+xml")
HEATMAP_PARAMS = {"parameters": heatmap_params()}
HEATMAP_HELP = (
    "\n\nQuery parameters: `tensor` (gradient), `stat` (underflows%; as logged, e.g. mxfp8_underflows%), "
    "`rank` (default: max over ranks per iteration), `sublayer` (one sublayer, e.g. qkv: one row per block), "
    "`vmax` (colour cap, default 6 for % stats), `dpi` (150, at most 600), `width`/`height` (inches), "
    "`mark_iteration`, `show_skip` (mark the recommended skip set), `boxes` (worst rows boxed, 5), "
    "`warning`/`critical`/`severe` (bands)."
)


def heatmap_query(request: Request, *, show_skip: bool = True, extra: frozenset[str] = frozenset()) -> HeatmapParams:
    return parse_heatmap_params(request.query_params, show_skip=show_skip, allowed=HEATMAP_KEYS | extra)


def image_response(rendered: Rendered) -> Response:
    return Response(rendered.content, media_type=rendered.media_type, headers=rendered.headers)


PNG_HELP = (
    "Components × iterations heatmap of one stat (gradient underflows% by default) as PNG. Rows follow model "
    "order with group separators and EMBEDDING / BODY / HEAD labels; layers that ran in BF16 are hatched "
    '"not in FP8" rows; the worst rows at or above the critical band are boxed; the recommended skip set is '
    "marked in the strip on the right; a summary box gives components, max, mean and the critical count." + HEATMAP_HELP
)


@router.get(
    "/api/v1/runs/{run_id}/heatmap.png",
    responses=PNG,
    response_class=Response,
    description=PNG_HELP,
    openapi_extra=HEATMAP_PARAMS,
)
async def heatmap_png(run_id: int, request: Request) -> Response:
    return await _heatmap_image(request, run_id, "png")


@router.get(
    "/api/v1/runs/{run_id}/heatmap.svg",
    responses=SVG,
    response_class=Response,
    openapi_extra=HEATMAP_PARAMS,
    description="The heatmap as SVG: text stays text; boxes, BF16 spans and skip markers carry ids "
    "(`critical-box-N`, `bf16-rows-N`, `skip-marker-N`)." + HEATMAP_HELP,
)
async def heatmap_svg(run_id: int, request: Request) -> Response:
    return await _heatmap_image(request, run_id, "svg")


async def _heatmap_image(request: Request, run_id: int, fmt: str) -> Response:
    """Drawn by the app's renderer (service/visual/pool.py): cached, in a worker process, never on the loop."""
    params = heatmap_query(request)
    state = request.app.state
    rendered = await state.renderer.image(
        state.unit_of_work,
        lambda session: actions.heatmap_cache_key(session, run_id, params, fmt),
        lambda session, max_pixels: actions.heatmap_job(session, run_id, params, fmt, max_pixels),
    )
    return image_response(rendered)


@router.get(
    "/api/v1/runs/{run_id}/heatmap.json",
    response_model=HeatmapLayoutRead,
    responses=ERRORS,
    openapi_extra={"parameters": heatmap_json_params()},
)
def heatmap_json(run_id: int, request: Request, session: SessionDep) -> HeatmapLayoutRead:
    """The heatmap's rows (label, layer, group, kind, p95 level, boxed, skip), iteration range, summary and the
    pixel extent of its cells at the requested dpi — for clients that draw or annotate it themselves. Takes the
    heatmap parameters, and `cells=N` for the values themselves (at most N columns) with the image's colour map
    (the dashboard draws its interactive heatmap from them)."""
    params = heatmap_query(request, extra=frozenset({"cells"}))
    columns = parse_cell_columns(request.query_params)
    return HeatmapLayoutRead.model_validate(actions.heatmap_layout(session, run_id, params, cell_columns=columns))
