"""HTTP routes comparing runs: two runs layer by layer with their heatmaps side by side (`/api/v1/compare`,
`/compare.png`, `/compare.svg`); 2-8 runs' verdicts and recommendations side by side (`/api/v1/compare/runs`), and
one metric of every run on one iteration axis (`/compare/series` for a layer's stat, `/compare/scalars` for a
training scalar such as the loss). Parameters are read by hand so that every bad value is a 400 `{"error", "detail"}`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter, Request
from fastapi.responses import Response

from fp8_policy._lazy import lazy_module
from fp8_policy.policy.live.scalar_events import SCALAR_KEYS
from fp8_policy.service.auth.deps import READ
from fp8_policy.service.compare.schemas import CompareRead, CompareRunsRead, CompareScalarsRead, CompareSeriesRead
from fp8_policy.service.deps import SessionDep, SettingsDep
from fp8_policy.service.errors import InvalidParameter, UnknownParameter
from fp8_policy.service.openapi import error_responses, query_param, threshold_params
from fp8_policy.service.visual.params import parse_threshold_overrides, run_id_param, thresholds_of
from fp8_policy.service.visual.query_docs import heatmap_params, run_pair_params
from fp8_policy.service.visual.routes import PNG, SVG, heatmap_query, image_response

if TYPE_CHECKING:
    from fp8_policy.service.compare import actions, pair
else:  # imported on first use: start-up path, tests/service/app/test_start_up_imports.py
    actions = lazy_module("fp8_policy.service.compare.actions")
    pair = lazy_module("fp8_policy.service.compare.pair")

router = APIRouter(tags=["visual"], dependencies=[READ])
ERRORS = error_responses(400, 404, 409)
COMPARE_IMAGE_PARAMS = {"parameters": [*run_pair_params(), *heatmap_params(show_skip_default=False)]}
RUNS = query_param(
    "runs",
    {"type": "string", "pattern": r"^\d+(,\d+){1,7}$", "examples": ["3,5,9"]},
    "2-8 distinct run ids, comma-separated (or the parameter repeated), in the order to show them; the first is "
    "the reference. Fewer, more or repeated ids: 400 InvalidRunSelection; unknown ids: 404; runs not ready: 409.",
    required=True,
)
SERIES_PARAMS = [
    RUNS,
    query_param(
        "layer", {"type": "string"}, "Exact layer name as logged (see GET /compare/runs `layers`).", required=True
    ),
    query_param(
        "tensor",
        {"type": "string", "examples": ["gradient"]},
        "As logged: activation, gradient, weight.",
        required=True,
    ),
    query_param(
        "stat",
        {"type": "string", "examples": ["underflows%"]},
        "As logged after the tensor, e.g. underflows%.",
        required=True,
    ),
]
SCALAR_PARAMS = [
    RUNS,
    query_param("name", {"type": "string", "enum": list(SCALAR_KEYS), "default": "loss"}, "The training scalar."),
]


def _query(request: Request, allowed: set[str]) -> list[int]:
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        raise UnknownParameter(
            f"unknown parameter(s): {', '.join(unknown)}; this route takes {', '.join(sorted(allowed))}"
        )
    return actions.parse_run_ids(request.query_params.getlist("runs"))


def _required(request: Request, name: str) -> str:
    value = request.query_params.get(name, "").strip()
    if not value:
        raise InvalidParameter(f"missing parameter {name!r}")
    return value


@router.get(
    "/api/v1/compare/runs", response_model=CompareRunsRead, responses=ERRORS, openapi_extra={"parameters": [RUNS]}
)
def compare_runs(request: Request, session: SessionDep) -> CompareRunsRead:
    """2-8 runs side by side: each run's verdict (severity, findings) and default recommendation (recipe, layers
    to BF16, GEMM overrides, precision ladder, predicted cost) in one table whose rows say where the runs differ;
    every layer's precision as logged and as each run's recommendation gives it; which (tensor, stat) the runs
    logged, and the layer and stat to look at first (`focus`). Layers match by exact name."""
    ids = _query(request, {"runs"})
    state = request.app.state
    body = actions.compare_runs(session, state.session_factory, state.recommendations, ids)
    return CompareRunsRead.model_validate(body)


@router.get(
    "/api/v1/compare/series",
    response_model=CompareSeriesRead,
    responses=ERRORS,
    openapi_extra={"parameters": SERIES_PARAMS},
)
def compare_series(request: Request, session: SessionDep) -> CompareSeriesRead:
    """One layer's tensor stat of every run (the max over ranks per iteration) on one iteration axis, for an
    overlay with one line per run; a run without it has no values and says why (`missing`). 404 when no run has
    it. Past 4000 iterations, consecutive iterations are averaged (`grouped`)."""
    ids = _query(request, {"runs", "layer", "tensor", "stat"})
    layer, tensor, stat = (_required(request, name) for name in ("layer", "tensor", "stat"))
    return CompareSeriesRead.model_validate(actions.compare_series(session, ids, layer, tensor, stat))


@router.get(
    "/api/v1/compare/scalars",
    response_model=CompareScalarsRead,
    responses=ERRORS,
    openapi_extra={"parameters": SCALAR_PARAMS},
)
def compare_scalars(request: Request, session: SessionDep, settings: SettingsDep) -> CompareScalarsRead:
    """One training scalar (`name`: loss by default) of every run on one step axis, from the scalars each run
    recorded (GET /live/runs/{id}/scalars); a run that recorded none says so in `missing` ('no loss recorded')."""
    ids = _query(request, {"runs", "name"})
    name = request.query_params.get("name", "loss")
    read = actions.scalar_reader(request.app.state.ingest.store, settings.data_dir)
    return CompareScalarsRead.model_validate(actions.compare_scalars(session, read, ids, name))


# --- two runs, with their heatmaps side by side (service/compare/pair.py) ------------------------------------
@router.get(
    "/api/v1/compare",
    response_model=CompareRead,
    responses=ERRORS,
    openapi_extra={"parameters": [*run_pair_params(), *threshold_params(("warning", "critical", "severe"))]},
    name="compare_runs",  # the operation id and summary it always had
)
def compare_two_runs(request: Request, session: SessionDep) -> CompareRead:
    """`?base=<run id>&head=<run id>`: per-layer and per-group change of gradient / activation / weight
    underflows% (level, max, mean, last) between two runs, precision changes, findings that appeared or
    disappeared, and summary sentences such as "body gradient underflow −34% (mean 1.20% → 0.79%) after head
    moved to BF16". Layers match by exact name. `warning` / `critical` / `severe` may be set."""
    query = request.query_params
    unknown = sorted(set(query) - {"base", "head", "warning", "critical", "severe"})
    if unknown:
        raise UnknownParameter(f"unknown parameter(s): {', '.join(unknown)}")
    thresholds = thresholds_of(parse_threshold_overrides(query))
    body = pair.compare_runs(session, run_id_param(query, "base"), run_id_param(query, "head"), thresholds)
    return CompareRead.model_validate(body)


@router.get("/api/v1/compare.png", responses=PNG, response_class=Response, openapi_extra=COMPARE_IMAGE_PARAMS)
async def compare_png(request: Request) -> Response:
    """`?base=&head=`: the two heatmaps side by side on one shared colour scale, titled with the run names.
    Takes the heatmap parameters too (`show_skip` defaults to false here)."""
    return await _compare_image(request, "png")


@router.get("/api/v1/compare.svg", responses=SVG, response_class=Response, openapi_extra=COMPARE_IMAGE_PARAMS)
async def compare_svg(request: Request) -> Response:
    """`compare.png` as SVG."""
    return await _compare_image(request, "svg")


async def _compare_image(request: Request, fmt: str) -> Response:
    query = request.query_params
    params = heatmap_query(request, show_skip=False, extra=frozenset({"base", "head"}))
    base, head = run_id_param(query, "base"), run_id_param(query, "head")
    state = request.app.state
    rendered = await state.renderer.image(
        state.unit_of_work,
        lambda session: pair.compare_cache_key(session, base, head, params, fmt),
        lambda session, max_pixels: pair.compare_job(session, base, head, params, fmt, max_pixels),
    )
    return image_response(rendered)
