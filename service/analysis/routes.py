"""HTTP routes for a run's analysis and its recommended precision policy (JSON or a rendered config)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy.orm import Session

from fp8_policy._lazy import lazy_module
from fp8_policy.policy.vocabulary import MEDIA_TYPES, OUTPUT_FORMATS, STAGED_FORMATS
from fp8_policy.service import lanes
from fp8_policy.service.analysis.schemas import AnalysisRead, RecommendationRead
from fp8_policy.service.auth.deps import READ
from fp8_policy.service.deps import SessionDep
from fp8_policy.service.errors import InvalidParameter, InvalidThresholds
from fp8_policy.service.limits import MAX_PP_STAGE
from fp8_policy.service.openapi import error_responses, query_param, threshold_params
from fp8_policy.service.single_flight import SingleFlightCache

if TYPE_CHECKING:
    from fp8_policy.policy.recommend import Recommendation
    from fp8_policy.policy.render import RenderedPolicy
    from fp8_policy.service.analysis import actions, summary, target
else:  # imported on first use: start-up path, tests/service/app/test_start_up_imports.py
    actions = lazy_module("fp8_policy.service.analysis.actions")
    summary = lazy_module("fp8_policy.service.analysis.summary")
    target = lazy_module("fp8_policy.service.analysis.target")

# Every route reads, the POST recommendation included: it recomputes from stored data and stores nothing.
router = APIRouter(prefix="/api/v1/runs", tags=["analysis"], dependencies=[READ])
ERRORS = error_responses(400, 404, 409)
FORMAT_HELP = (
    "json (default), te-yaml, megatron, hydra, torchao, te-recipe (a Python module with qfactory(role) for TE's"
    " CustomRecipe: every layer and GEMM at its precision), torchtitan (torchtitan 0.3 converter configs), or"
    " te-monitor (a TE debug YAML that only watches a run whose policy was applied with apply_policy: kept layers get"
    " LogTensorStats only)"
)
FORMAT_QUERY = Query(description=FORMAT_HELP, json_schema_extra={"enum": ["json", *OUTPUT_FORMATS]})
_GET_OPTION_KEYS = ("gpu_arch", "gpu", "te_version", "current_recipe", "previous_run", "lr_decay_start", "target")
PHASE_QUERY = Query(
    ge=0,
    le=1000,  # a schedule has a few phases; a number past any is refused by FastAPI, not looked up
    description="Render phase K of the recommendation's `schedule` (a rendered format only): its configuration, "
    "with the step to restart at.",
)
OVERRIDES_HELP = (
    "Any of: `thresholds` (name -> number, as in GET .../analysis), `gpu_arch`, `model_dims` "
    "(hidden_size, ffn_hidden_size, num_layers, seq_len, vocab_size, num_attention_heads, "
    "num_query_groups, gated_mlp), `te_version`, `current_recipe`, `keep_existing_bf16`, "
    "`skip_projected`, `lr_decay_start`, `target`. Unknown keys or bad values are a 400 InvalidOverrides "
    "(InvalidTarget)."
)
# Documentation of each non-threshold GET parameter in _GET_OPTION_KEYS (tests/service/app/test_openapi_document.py
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
    "lr_decay_start": (
        "The step the learning rate starts to decay: an NVFP4 policy gets a later phase (`schedule`) from there.",
        ["90000"],
    ),
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
PP_STAGE = "pp_stage"
_PP_STAGE_PARAM = query_param(
    PP_STAGE,
    {"type": "integer", "minimum": 0, "maximum": MAX_PP_STAGE},
    "Pipeline stage of a te-yaml / te-monitor file: a job whose stages name their blocks by their index on the "
    "stage (from 0 on every stage) gets one file per stage, and without pp_stage a 400 PipelineStageRequired "
    "naming the stages; with global names one file serves every stage. Stages the job does not have are a 400.",
)
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
        if key in ("format", "phase", PP_STAGE):
            continue
        if key in _GET_OPTION_KEYS:
            overrides[key] = _number(value) if key == "lr_decay_start" else value
        else:
            thresholds[key] = _number(value)
    if thresholds:
        overrides["thresholds"] = thresholds
    return overrides


def pp_stage_of(request: Request, fmt: str) -> int | None:
    """`pp_stage` as a stage number (0 to MAX_PP_STAGE, ASCII digits), only for the per-stage formats."""
    text = request.query_params.get(PP_STAGE)
    if text is None:
        return None
    text = text.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= len(str(MAX_PP_STAGE))) or int(text) > MAX_PP_STAGE:
        raise InvalidParameter(f"pp_stage must be a pipeline stage number from 0 to {MAX_PP_STAGE}, got {text[:20]!r}")
    if fmt not in STAGED_FORMATS:
        raise InvalidParameter(
            f"pp_stage applies to format {' or '.join(STAGED_FORMATS)} (one file per pipeline stage); "
            f"{fmt} is one answer for every stage"
        )
    return int(text)


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
    openapi_extra={"parameters": [*threshold_params(), *_OPTION_PARAMS, _PP_STAGE_PARAM]},
)
def read_recommendation(
    run_id: int,
    request: Request,
    session: SessionDep,
    format: Annotated[str, FORMAT_QUERY] = "json",
    phase: Annotated[int | None, PHASE_QUERY] = None,
) -> RecommendationRead | Response:
    """The recommended policy: `fp8_skip_layers`, `gemm_overrides`, `recipe`, `megatron`, `expected_cost`,
    `rationale`, `confidence`, `policy_version` — or, with `?format=`, the same policy as a TE debug YAML,
    Megatron flags, bionemo Hydra overrides or a torchao filter; `te-monitor` is the debug YAML for watching a
    run the policy was applied to with `apply_policy` (no Disable* feature, kept layers on LogTensorStats only).
    Thresholds, `gpu_arch`, `te_version` and `current_recipe` may be given as query parameters; `pp_stage` asks
    for one pipeline stage's te-yaml / te-monitor file (needed when the job's stages name their blocks locally)."""
    stage = pp_stage_of(request, format)
    return respond_recommendation(request, session, run_id, _query_overrides(request), format, phase, stage)


@router.post(
    "/{run_id}/recommendation",
    response_model=RecommendationRead,
    response_model_exclude_unset=True,
    responses=RECOMMENDATION_RESPONSES,
    openapi_extra={"parameters": [_PP_STAGE_PARAM]},
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
    phase: Annotated[int | None, PHASE_QUERY] = None,
) -> RecommendationRead | Response:
    """Recompute the recommendation from stored data with overrides (thresholds, GPU arch, model dims,
    TE version, current recipe) without re-ingesting."""
    return respond_recommendation(request, session, run_id, overrides, format, phase, pp_stage_of(request, format))


def respond_recommendation(
    request: Request,
    session: Session,
    run_id: int,
    overrides: dict[str, Any],
    fmt: str,
    phase: int | None = None,
    stage: int | None = None,
) -> RecommendationRead | Response:
    """The answer in `fmt` (`stage`: one pipeline stage's te-yaml / te-monitor, `pp_stage_of`), as GET/POST
    .../recommendation gives it; service/configs/actions.py keeps these bytes."""
    # a target re-solves the recommendation computed without it (cached): no second load of the run's series
    overrides, budget = target.split_target(overrides)
    # computed once per (run as stored, options, policy version), and each answer serialized once per format;
    # identical concurrent requests wait for the one computing it (service/analysis/recommendation_cache.py)
    if overrides:  # refused before it takes a place in the analysis lane
        actions.check_overrides(overrides)
    key = target.keys(session, run_id, overrides, budget)[1]
    # one cache for recommendations, their JSON bodies and their rendered files: the key's tail says which
    cache: SingleFlightCache[Any] = request.app.state.recommendations
    # with options, a request that computes or waits for an identical one computing holds a place in the analysis
    # lane (service/lanes.py: 429 beyond), so a flood of them holds a bounded number of request threads; without,
    # the answer is the one stored with the run's summary
    admit = lanes.ANALYSIS.admission if overrides or budget is not None else None

    def recommendation() -> Recommendation:
        return target.cached(cache, session, run_id, overrides, budget, admit)

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
        kept = summary.stored_rendering(from_summary(), fmt) if stage is None else None
        return kept if kept is not None else actions.render_recommendation(recommendation(), fmt, stage)

    if fmt == "json":
        if phase is not None:
            raise InvalidParameter("phase renders one phase of the schedule: give a rendered format, not json")
        # the newest experiment's verdict is read per request (one indexed query): never stale; the app hands the
        # reading over (service/app.py `_with_verification`), as experiments come after the analysis in the flow
        body = request.app.state.with_verification(session, run_id, cache.get((*key, "json"), json_body, admit))
        return Response(body, media_type="application/json")
    if phase is not None:
        rendered = cache.get(
            (*key, fmt, "phase", phase, stage),
            lambda: actions.render_recommendation(recommendation(), fmt, stage, phase),
            admit,
        )
    else:
        rendered = cache.get((*key, fmt, stage), rendering, admit)
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
