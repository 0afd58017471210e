"""HTTP routes for a run's analysis and its recommended precision policy (JSON or a rendered config)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy.orm import Session

from fp8_policy._lazy import lazy_module
from fp8_policy.policy.vocabulary import MEDIA_TYPES, OUTPUT_FORMATS
from fp8_policy.service.analysis.recommendation_cache import SingleFlightCache
from fp8_policy.service.analysis.schemas import AnalysisRead, RecommendationRead
from fp8_policy.service.auth.deps import READ
from fp8_policy.service.deps import SessionDep
from fp8_policy.service.errors import InvalidThresholds
from fp8_policy.service.openapi import error_responses, query_param, threshold_params

if TYPE_CHECKING:
    from fp8_policy.policy.recommend import Recommendation
    from fp8_policy.policy.render import RenderedPolicy
    from fp8_policy.service.analysis import actions, summary, target
    from fp8_policy.service.experiments import actions as experiments
else:  # imported on first use: start-up path, tests/service/test_start_up_imports.py
    actions = lazy_module("fp8_policy.service.analysis.actions")
    summary = lazy_module("fp8_policy.service.analysis.summary")
    target = lazy_module("fp8_policy.service.analysis.target")
    experiments = lazy_module("fp8_policy.service.experiments.actions")

# Every route reads, the POST recommendation included: it recomputes from stored data and stores nothing.
router = APIRouter(prefix="/api/v1/runs", tags=["analysis"], dependencies=[READ])
ERRORS = error_responses(400, 404, 409)
FORMAT_HELP = (
    "json (default), te-yaml, megatron, hydra, torchao, or te-monitor (a TE debug YAML that only watches a run"
    " whose policy was applied with apply_policy: kept layers get LogTensorStats only)"
)
FORMAT_QUERY = Query(description=FORMAT_HELP, json_schema_extra={"enum": ["json", *OUTPUT_FORMATS]})
_GET_OPTION_KEYS = ("gpu_arch", "gpu", "te_version", "current_recipe", "previous_run", "target")
OVERRIDES_HELP = (
    "Any of: `thresholds` (name -> number, as in GET .../analysis), `gpu_arch`, `model_dims` "
    "(hidden_size, ffn_hidden_size, num_layers, seq_len, vocab_size, num_attention_heads, "
    "num_query_groups, gated_mlp), `te_version`, `current_recipe`, `keep_existing_bf16`, "
    "`skip_projected`, `target`. Unknown keys or bad values are a 400 InvalidOverrides (InvalidTarget)."
)
# Documentation of each non-threshold GET parameter in _GET_OPTION_KEYS (tests/service/test_openapi_document.py
# fails when one is missing here).
_OPTION_HELP = {
    "gpu_arch": (
        "GPU the policy is for (decides which recipes are possible); default: the run's metadata.",
        ["hopper", "sm90", "blackwell"],
    ),
    "gpu": ("Same as gpu_arch.", ["H100"]),
    "te_version": ("Transformer Engine version the rendered config targets; default: the run's metadata.", ["2.8"]),
    "current_recipe": (
        "The recipe the run trained with (DelayedScaling, current, block, mxfp8, ...); default: the run's metadata.",
        ["delayed", "current", "mxfp8"],
    ),
    "previous_run": ("Id of the run this one follows: the recommendation then says what changed (`history`).", ["41"]),
    "target": (
        "A budget re-solved on the stored frontier: speedup:<x> (GEMM-time speedup over all-BF16, 1-10: the least "
        "predicted risk reaching it) or risk:<x> (nats per step, 0-1e6: the fastest point within it). 400 "
        "InvalidTarget on anything else; 409 NoSensitivity when the run logged no loss sensitivity.",
        ["speedup:1.6", "risk:0.01"],
    ),
}
_OPTION_PARAMS = [
    query_param(key, {"type": "string", "examples": _OPTION_HELP[key][1]}, _OPTION_HELP[key][0])
    if key in _OPTION_HELP
    else query_param(key, {"type": "string"}, "")
    for key in _GET_OPTION_KEYS
]
# The rendered formats' media types (?format= other than json; policy/vocabulary.py, each dialect's MEDIA_TYPE).
_RENDERED = {media_type: {"schema": {"type": "string"}} for media_type in MEDIA_TYPES.values()}
RECOMMENDATION_RESPONSES = {
    **ERRORS,
    200: {
        "description": "The policy as JSON, or rendered in the requested format (sent as an attachment)",
        "content": _RENDERED,
    },
}


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


@router.get(
    "/{run_id}/analysis",
    response_model=AnalysisRead,
    responses=ERRORS,
    openapi_extra={"parameters": threshold_params()},
)
def read_analysis(run_id: int, request: Request, session: SessionDep) -> AnalysisRead:
    """Findings (pattern, severity, layers, numeric evidence) and the per-layer table.

    Any threshold may be set as a query parameter, e.g. `?critical=3&severe=6`.
    """
    overrides = _query_overrides(request)
    unknown = set(overrides) - {"thresholds"}
    if unknown:
        raise InvalidThresholds(f"not a threshold: {', '.join(sorted(unknown))}")
    if not overrides:  # default thresholds: the analysis stored for this policy version (service/analysis/summary.py)
        return AnalysisRead.model_validate(summary.stored_analysis(request.app.state.session_factory, run_id))
    thresholds = actions.thresholds_from(overrides.get("thresholds"))
    _data, analysis = actions.load_and_analyze(session, run_id, thresholds)
    return AnalysisRead.model_validate({"run_id": run_id, **analysis.to_dict()})


@router.get(
    "/{run_id}/recommendation",
    response_model=RecommendationRead,
    response_model_exclude_unset=True,
    responses=RECOMMENDATION_RESPONSES,
    openapi_extra={"parameters": [*threshold_params(), *_OPTION_PARAMS]},
)
def read_recommendation(
    run_id: int,
    request: Request,
    session: SessionDep,
    format: Annotated[str, FORMAT_QUERY] = "json",
) -> RecommendationRead | Response:
    """The recommended policy: `fp8_skip_layers`, `gemm_overrides`, `recipe`, `megatron`, `expected_cost`,
    `rationale`, `confidence`, `policy_version` — or, with `?format=`, the same policy as a TE debug YAML,
    Megatron flags, bionemo Hydra overrides or a torchao filter; `te-monitor` is the debug YAML for watching a
    run the policy was applied to with `apply_policy` (no Disable* feature, kept layers on LogTensorStats only).
    Thresholds, `gpu_arch`, `te_version` and `current_recipe` may be given as query parameters."""
    return _respond(request, session, run_id, _query_overrides(request), format)


@router.post(
    "/{run_id}/recommendation",
    response_model=RecommendationRead,
    response_model_exclude_unset=True,
    responses=RECOMMENDATION_RESPONSES,
)
def recompute_recommendation(
    run_id: int,
    request: Request,
    session: SessionDep,
    overrides: Annotated[
        dict[str, Any],
        Body(
            description=OVERRIDES_HELP,
            examples=[
                {
                    "thresholds": {"critical": 3.0},
                    "gpu_arch": "hopper",
                    "model_dims": {"hidden_size": 1280},
                    "te_version": "2.13",
                }
            ],
        ),
    ],
    format: Annotated[str, FORMAT_QUERY] = "json",
) -> RecommendationRead | Response:
    """Recompute the recommendation from stored data with overrides (thresholds, GPU arch, model dims,
    TE version, current recipe) without re-ingesting."""
    return _respond(request, session, run_id, overrides, format)


def _respond(
    request: Request, session: Session, run_id: int, overrides: dict[str, Any], fmt: str
) -> RecommendationRead | Response:
    # a target re-solves the recommendation computed without it (cached): no second load of the run's series
    overrides, budget = target.split_target(overrides)
    # computed once per (run as stored, options, policy version), and each answer serialized once per format;
    # identical concurrent requests wait for the one computing it (service/analysis/recommendation_cache.py)
    key = target.keys(session, run_id, overrides, budget)[1]
    # one cache for recommendations, their JSON bodies and their rendered files: the key's tail says which
    cache: SingleFlightCache[Any] = request.app.state.recommendations

    def recommendation() -> Recommendation:
        return target.cached(cache, session, run_id, overrides, budget)

    # without options, the answers stored with the run's summary when it was ingested (service/analysis/summary.py),
    # read at most once per request and only when this process has not cached the answer yet; when none is stored
    # (the ingest is still computing it, or the summary predates stored recommendations), the run's summary is
    # computed and stored once, a computation already running in this process waited for
    stored: list[dict[str, Any] | None] = []

    def from_summary() -> dict[str, Any] | None:
        if overrides or budget is not None:
            return None
        if not stored:
            stored.append(summary.recommendation_answers(request.app.state.session_factory, session, run_id))
        return stored[0]

    def json_body() -> bytes:
        answers = from_summary()
        return _json_bytes(answers["json"]) if answers is not None else _json_body(run_id, recommendation())

    def rendering() -> RenderedPolicy:
        kept = summary.stored_rendering(from_summary(), fmt)
        return kept if kept is not None else actions.render_recommendation(recommendation(), fmt)

    if fmt == "json":  # the newest experiment's verdict is read per request (one indexed query): never stale
        body = experiments.with_verification(session, run_id, cache.get((*key, "json"), json_body))
        return Response(body, media_type="application/json")
    rendered = cache.get((*key, fmt), rendering)
    return Response(
        rendered.content,
        media_type=rendered.media_type,
        headers={"Content-Disposition": f'attachment; filename="{rendered.filename}"'},
    )


def _json_body(run_id: int, rec: Recommendation) -> bytes:
    """The JSON answer as FastAPI would serialize the response model (unset fields left out)."""
    return _json_bytes(actions.recommendation_answer(run_id, rec))


def _json_bytes(answer: dict[str, Any]) -> bytes:
    return bytes(JSONResponse(answer).body)
