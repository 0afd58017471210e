"""HTTP routes for a run's analysis and its recommended precision policy (JSON or a rendered config)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import JSONResponse, Response

from fp8_policy.service.analysis import actions
from fp8_policy.service.deps import SessionDep
from fp8_policy.service.errors import BadRequest, ErrorBody

router = APIRouter(prefix="/api/v1/runs", tags=["analysis"])
ERRORS = {400: {"model": ErrorBody}, 404: {"model": ErrorBody}, 409: {"model": ErrorBody}}
FORMAT_HELP = "json (default), te-yaml, megatron, hydra or torchao"
_GET_OPTION_KEYS = ("gpu_arch", "te_version", "current_recipe")


def _query_overrides(request: Request) -> dict[str, Any]:
    """GET parameters: threshold names (numbers) plus gpu_arch / te_version / current_recipe."""
    overrides: dict[str, Any] = {}
    thresholds: dict[str, int | float | str] = {}
    for key, value in request.query_params.items():
        if key == "format":
            continue
        if key in _GET_OPTION_KEYS:
            overrides[key] = value
        else:
            thresholds[key] = _number(value)
    if thresholds:
        overrides["thresholds"] = thresholds
    return overrides


def _number(text: str) -> int | float | str:
    """A query string as the number it spells (thresholds validate the type); other text unchanged."""
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            continue
    return text


@router.get("/{run_id}/analysis", responses=ERRORS)
def read_analysis(run_id: int, request: Request, session: SessionDep) -> JSONResponse:
    """Findings (pattern, severity, layers, numeric evidence) and the per-layer table.

    Any threshold may be set as a query parameter, e.g. `?critical=3&severe=6`.
    """
    overrides = _query_overrides(request)
    unknown = set(overrides) - {"thresholds"}
    if unknown:
        raise BadRequest(f"not a threshold: {', '.join(sorted(unknown))}", error="InvalidThresholds")
    thresholds = actions.thresholds_from(overrides.get("thresholds"))
    _data, analysis = actions.load_and_analyze(session, run_id, thresholds)
    return JSONResponse({"run_id": run_id, **analysis.to_dict()})


@router.get("/{run_id}/recommendation", responses=ERRORS)
def read_recommendation(
    run_id: int,
    request: Request,
    session: SessionDep,
    format: Annotated[str, Query(description=FORMAT_HELP)] = "json",
) -> Response:
    """The recommended policy: `fp8_skip_layers`, `gemm_overrides`, `recipe`, `megatron`, `expected_cost`,
    `rationale`, `confidence`, `policy_version` — or, with `?format=`, the same policy as a TE debug YAML,
    Megatron flags, bionemo Hydra overrides or a torchao filter. Thresholds, `gpu_arch`, `te_version`
    and `current_recipe` may be given as query parameters."""
    return _respond(session, run_id, _query_overrides(request), format)


@router.post("/{run_id}/recommendation", responses=ERRORS)
def recompute_recommendation(
    run_id: int,
    session: SessionDep,
    overrides: Annotated[dict[str, Any], Body(examples=[{"thresholds": {"critical": 3.0}, "gpu_arch": "hopper",
                                                        "model_dims": {"hidden_size": 1280}, "te_version": "2.13"}])],
    format: Annotated[str, Query(description=FORMAT_HELP)] = "json",
) -> Response:
    """Recompute the recommendation from stored data with overrides (thresholds, GPU arch, model dims,
    TE version, current recipe) without re-ingesting."""
    return _respond(session, run_id, overrides, format)


def _respond(session, run_id: int, overrides: dict[str, Any], fmt: str) -> Response:
    rec = actions.recommendation_for(session, run_id, overrides)
    if fmt == "json":
        return JSONResponse({"run_id": run_id, **rec.to_dict()})
    rendered = actions.render_recommendation(rec, fmt)
    return Response(rendered.content, media_type=rendered.media_type,
                    headers={"Content-Disposition": f'attachment; filename="{rendered.filename}"'})
