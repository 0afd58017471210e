"""Use cases behind analysis and recommendation: load a stored run as `RunData`, analyse, recommend, render."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.orm import Session

from fp8_policy.db.codec import decode_iterations, decode_values
from fp8_policy.db.runs import RunRepository
from fp8_policy.policy.analysis import Analysis, analyze
from fp8_policy.policy.parallel.info import ParallelInfo
from fp8_policy.policy.parse.lr_schedule import decay_start_of
from fp8_policy.policy.recommend import History, Recommendation, RecommendOptions, recommend, schedule
from fp8_policy.policy.records import LayerGroup, LayerInfo, LayerStructure, MetricName, Precision, RunData, Series
from fp8_policy.policy.render import OUTPUT_FORMATS, RenderedPolicy, RenderOptions, pipeline, render
from fp8_policy.policy.thresholds import Thresholds
from fp8_policy.service import lanes, limits
from fp8_policy.service.analysis.schemas import RecommendationRead
from fp8_policy.service.errors import (
    InvalidOverrides,
    InvalidParameter,
    InvalidThresholds,
    PipelineStageRequired,
    UnknownFormat,
)
from fp8_policy.service.runs.actions import get_ready_run


def load_run_data(session: Session, run_id: int) -> RunData:
    """Every layer and series of a ready run, decoded, in the shape the policy code takes."""
    run = get_ready_run(session, run_id)
    repo = RunRepository(session)
    layers = {
        layer.name: LayerInfo(
            name=layer.name,
            structure=LayerStructure(LayerGroup(layer.group), layer.layer_index, layer.sublayer),
            precision=Precision(layer.precision),
            has_fp8_stats=layer.has_fp8_stats,
        )
        for layer in repo.layers(run_id)
    }
    series = [
        Series(
            rank=row.rank,
            metric=MetricName(layer_name, row.tensor, row.stat, row.recipe, row.columnwise),
            iterations=decode_iterations(row.iterations),
            values=decode_values(row.values),
        )
        for row, layer_name in repo.point_arrays(run_id)
    ]
    return RunData(
        layers=layers,
        series=series,
        metadata=dict(run.run_metadata or {}),
        session_offsets=session_offsets(run.ingest_report),
        parallel=ParallelInfo.from_json(run.parallel) if run.parallel else None,
        lr_decay_from_scalars=decay_start_of(run.ingest_report),  # the lr curve of its scalars (uploaded or streamed)
    )


def session_offsets(report: Any) -> dict[str, int]:
    """Stats file -> iteration offset of each restarted session, from the stored ingest report."""
    files = report.get("files") if isinstance(report, dict) else None
    return {
        str(f["path"]): int(f["iteration_offset"])
        for f in files or ()
        if isinstance(f, dict) and f.get("kind") == "stats" and f.get("iteration_offset")
    }


def thresholds_from(overrides: Mapping[str, Any] | None) -> Thresholds:
    try:
        return Thresholds.from_overrides(overrides)
    except ValueError as exc:
        raise InvalidThresholds(str(exc)) from exc


def load_and_analyze(session: Session, run_id: int, thresholds: Thresholds | None = None) -> tuple[RunData, Analysis]:
    """Load and analyse the run now, in the analysis lane (service/lanes.py: 429 ComputeQueueFull when full)."""
    with lanes.ANALYSIS.turn():
        data = load_run_data(session, run_id)
        return data, analyze(data, thresholds or Thresholds())


def check_overrides(overrides: Mapping[str, Any]) -> None:
    """400 InvalidOverrides for options no run could take (an unknown key, a bad value, a dimension past its
    bound, a malformed previous_run): checked before a request takes a place in the analysis lane."""
    options = dict(overrides)
    previous = options.pop("previous_run", None)
    try:
        RecommendOptions.from_metadata({}, options)
    except ValueError as exc:
        raise InvalidOverrides(str(exc)) from exc
    if previous is not None:
        _run_id(previous)


def recommendation_for(session: Session, run_id: int, overrides: Mapping[str, Any] | None) -> Recommendation:
    """Recompute from stored data: run metadata first, then the request's overrides on top. `previous_run` (a run
    id) names the run before this one: its analysis (same thresholds) is the recommendation's history."""
    with lanes.ANALYSIS.turn():  # service/lanes.py: at most a few at once, 429 ComputeQueueFull beyond
        return _recommendation_for(session, run_id, dict(overrides or {}))


def _recommendation_for(session: Session, run_id: int, overrides: dict[str, Any]) -> Recommendation:
    previous = overrides.pop("previous_run", None)
    data = load_run_data(session, run_id)
    try:
        options = RecommendOptions.from_metadata(data.metadata, overrides)
    except ValueError as exc:
        raise InvalidOverrides(str(exc)) from exc
    history = None
    if previous is not None:
        previous_id = _run_id(previous)
        if previous_id == run_id:
            raise InvalidOverrides("previous_run must be another run than the one recommended for")
        history = History(analyze(load_run_data(session, previous_id), options.thresholds), previous_id)
    return recommend(data, analyze(data, options.thresholds), options, history)


def _run_id(value: Any) -> int:
    """A run id given as a JSON number or a query string (service/limits.py `run_id_of`), or 400."""
    run_id = limits.run_id_of(value)
    if run_id is None:
        raise InvalidOverrides(
            f"previous_run must be a run id (an integer from 1 to {limits.MAX_ROW_ID}), got {str(value)[:40]!r}"
        )
    return run_id


def recommendation_answer(run_id: int, rec: Recommendation) -> dict[str, Any]:
    """The JSON answer of GET /recommendation as FastAPI would serialize its response model (unset fields left
    out); the route sends it, the run's summary stores it (service/analysis/summary.py)."""
    model = RecommendationRead.model_validate({"run_id": run_id, **rec.to_dict()})
    answer: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return answer


def render_recommendation(
    rec: Recommendation, fmt: str, pp_stage: int | None = None, phase: int | None = None
) -> RenderedPolicy:
    """The policy in `fmt`; `pp_stage`: one pipeline stage's te-yaml / te-monitor file (policy/render/pipeline.py);
    `phase`: that phase of the recommendation's schedule (policy/recommend/schedule.py)."""
    if fmt not in OUTPUT_FORMATS:
        raise UnknownFormat(f"unknown format {fmt!r}; expected json or one of: {', '.join(OUTPUT_FORMATS)}")
    options = RenderOptions(pp_stage=pp_stage)
    try:
        if phase is not None:
            try:
                return schedule.render_phase(rec.schedule, phase, fmt, options)
            except IndexError as exc:
                raise InvalidParameter(str(exc)) from exc
        return schedule.with_header(render(rec.decision, fmt, options), schedule.schedule_note(rec.schedule))
    except pipeline.PipelineStageRequired as exc:
        raise PipelineStageRequired(str(exc)) from exc
    except pipeline.InvalidPipelineStage as exc:
        raise InvalidParameter(str(exc)) from exc
