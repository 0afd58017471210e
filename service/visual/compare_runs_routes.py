"""HTTP routes comparing 2-8 runs: verdicts and recommendations side by side (`/api/v1/compare/runs`), and one
metric of every run on one iteration axis (`/compare/series` for a layer's stat, `/compare/scalars` for a training
scalar such as the loss). Parameters are read by hand so that every bad value is a 400 `{"error", "detail"}`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter, Request

from fp8_policy._lazy import lazy_module
from fp8_policy.policy.live.scalar_events import SCALAR_KEYS
from fp8_policy.service.auth.deps import READ
from fp8_policy.service.deps import SessionDep, SettingsDep
from fp8_policy.service.errors import InvalidParameter, UnknownParameter
from fp8_policy.service.openapi import error_responses, query_param
from fp8_policy.service.visual.compare_runs_schemas import CompareRunsRead, CompareScalarsRead, CompareSeriesRead

if TYPE_CHECKING:
    from fp8_policy.service.visual import compare_runs as actions
else:  # imported on first use: start-up path, tests/service/test_start_up_imports.py
    actions = lazy_module("fp8_policy.service.visual.compare_runs")

router = APIRouter(prefix="/api/v1/compare", tags=["visual"], dependencies=[READ])
ERRORS = error_responses(400, 404, 409)
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


@router.get("/runs", response_model=CompareRunsRead, responses=ERRORS, openapi_extra={"parameters": [RUNS]})
def compare_runs(request: Request, session: SessionDep) -> CompareRunsRead:
    """2-8 runs side by side: each run's verdict (severity, findings) and default recommendation (recipe, layers
    to BF16, GEMM overrides, precision ladder, predicted cost) in one table whose rows say where the runs differ;
    every layer's precision as logged and as each run's recommendation gives it; which (tensor, stat) the runs
    logged, and the layer and stat to look at first (`focus`). Layers match by exact name."""
    ids = _query(request, {"runs"})
    state = request.app.state
    body = actions.compare_runs(session, state.session_factory, state.recommendations, ids)
    return CompareRunsRead.model_validate(body)


@router.get("/series", response_model=CompareSeriesRead, responses=ERRORS, openapi_extra={"parameters": SERIES_PARAMS})
def compare_series(request: Request, session: SessionDep) -> CompareSeriesRead:
    """One layer's tensor stat of every run (the max over ranks per iteration) on one iteration axis, for an
    overlay with one line per run; a run without it has no values and says why (`missing`). 404 when no run has
    it. Past 4000 iterations, consecutive iterations are averaged (`grouped`)."""
    ids = _query(request, {"runs", "layer", "tensor", "stat"})
    layer, tensor, stat = (_required(request, name) for name in ("layer", "tensor", "stat"))
    return CompareSeriesRead.model_validate(actions.compare_series(session, ids, layer, tensor, stat))


@router.get(
    "/scalars", response_model=CompareScalarsRead, responses=ERRORS, openapi_extra={"parameters": SCALAR_PARAMS}
)
def compare_scalars(request: Request, session: SessionDep, settings: SettingsDep) -> CompareScalarsRead:
    """One training scalar (`name`: loss by default) of every run on one step axis, from the scalars each run
    recorded (GET /live/runs/{id}/scalars); a run that recorded none says so in `missing` ('no loss recorded')."""
    ids = _query(request, {"runs", "name"})
    name = request.query_params.get("name", "loss")
    read = actions.scalar_reader(request.app.state.ingest.store, settings.data_dir)
    return CompareScalarsRead.model_validate(actions.compare_scalars(session, read, ids, name))
