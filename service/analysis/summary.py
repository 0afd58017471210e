"""A ready run's stored summary: its default analysis and the runs-list columns, computed once per policy version.

Belongs here: what the summary holds (worst severity, the leading finding, how many layers the recommendation
keeps in BF16) and when it is computed — after ingest, or by `SummaryRefresher` in the background for runs whose
summary is missing or was computed by an older `POLICY_VERSION`. The runs list only reads stored summaries
(a list request never analyses a run); GET /analysis with default thresholds serves the stored analysis, and
GET /recommendation without options the stored answers (JSON and rendered) while they are fresh.
A run's summary is computed at most once at a time per process (`ensure`): the ingest computes it right after
`ready`, and a reader that arrives meanwhile (or the background refresher) waits for that computation instead of
starting its own: on 2 cores a second computation of a 2.4M-point run doubled the time of both. A run whose
stored summary has no recommendation (stored before the column existed) gets it on its first read, or from the
start-up pass (`SummaryRefresher.catch_up`, service/analysis/refresher.py), which waits while the service is
ingesting or receiving uploads.
SQL is in db/summaries.py.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from fp8_policy.db.run_models import Run
from fp8_policy.db.session import is_in_memory, session_scope
from fp8_policy.db.summaries import SummaryRecord, SummaryRepository
from fp8_policy.policy.analysis import analyze
from fp8_policy.policy.recommend import POLICY_VERSION, Recommendation, RecommendOptions, recommend
from fp8_policy.policy.records import RunData
from fp8_policy.policy.render import OUTPUT_FORMATS, RenderedPolicy
from fp8_policy.policy.thresholds import Severity, Thresholds
from fp8_policy.service.analysis.actions import load_run_data, recommendation_answer, render_recommendation
from fp8_policy.service.errors import AppError, InvalidOverrides, PipelineStageRequired
from fp8_policy.service.runs.actions import get_ready_run
from fp8_policy.service.single_flight import SingleFlightCache

log = logging.getLogger("fp8_policy.summary")
Computed = tuple[SummaryRecord, dict[str, Any], dict[str, Any]]
# The summary computations running in this process, one per (database, run, policy version); nothing finished is
# kept here (the database is where summaries are kept).
_RUNNING: SingleFlightCache[Computed] = SingleFlightCache(max_entries=0)


def load(session: Session, run_id: int) -> tuple[Run, RunData]:
    """What `compute` reads: the ready run's row and its decoded layers and series."""
    return get_ready_run(session, run_id), load_run_data(session, run_id)


def compute(run: Run, data: RunData) -> Computed:
    """Analyse the stored run with default thresholds and recommend as GET /recommendation would: the summary,
    the analysis, and the recommendation's stored answers (when the run's metadata is refused, the refusal:
    {"run": ..., "refused": the 400's detail}). No database: it runs after `load`'s transaction has ended, so a
    pooled connection (and, on PostgreSQL, a snapshot) is not held through seconds of analysis on a busy
    machine."""
    run_id = run.id
    analysis = analyze(data, Thresholds())
    refused: str | None = None
    try:
        options = RecommendOptions.from_metadata(data.metadata, {})
    except ValueError as exc:  # metadata the recommender cannot read: the summary uses defaults, the API says why
        options = RecommendOptions.from_metadata({}, {})
        refused = str(exc)
    same = options.thresholds == analysis.requested_thresholds  # NVFP4 runs are judged with their own bands
    rec_analysis = analysis if same else analyze(data, options.thresholds)
    rec = recommend(data, rec_analysis, options)
    recommendation = rec.to_dict()
    answers = _answers(run, rec) if refused is None else {"run": run_identity(run), "refused": refused}
    findings = analysis.findings
    worst = max((f.severity for f in findings), default=Severity.OK)
    lead = findings[0] if findings else None
    record = SummaryRecord(
        run_id=run_id,
        policy_version=POLICY_VERSION,
        severity=Severity(worst).value,
        pattern=lead.pattern.value if lead else None,
        headline=lead.summary if lead else None,
        to_bf16=len(recommendation.get("fp8_skip_layers") or []),
        gemm_overrides=len(recommendation.get("gemm_overrides") or {}),
        precision_mix=dict(rec.headline.get("precision_mix") or {}),
        gemm_speedup=rec.headline.get("gemm_speedup_vs_all_bf16"),
    )
    return record, {"run_id": run_id, **analysis.to_dict()}, answers


def run_identity(run: Run) -> dict[str, str]:
    """What a stored recommendation was computed from besides the policy version (as in recommendation_cache's
    key): a recommendation stored for other metadata (or other bytes) is not served."""
    return {
        "sha256": str(run.sha256),
        "finished_at": str(run.finished_at),
        "metadata": json.dumps(run.run_metadata or {}, sort_keys=True, default=str),
    }


def _answers(run: Run, rec: Recommendation) -> dict[str, Any]:
    """GET /recommendation's answers without options: the JSON body and each rendered format (a format whose
    rendering fails is left out: the request then renders it and answers as it always did)."""
    rendered: dict[str, dict[str, str]] = {}
    for fmt in OUTPUT_FORMATS:
        try:
            policy = render_recommendation(rec, fmt)
        except PipelineStageRequired:  # one file per pipeline stage: asked for with pp_stage, never stored
            continue
        except Exception:  # noqa: BLE001 - the live path raises it again to the client
            log.info("recommendation of run %s is not stored as %s", run.id, fmt, exc_info=True)
            continue
        rendered[fmt] = {"content": policy.content, "media_type": policy.media_type, "filename": policy.filename}
    return {"run": run_identity(run), "json": recommendation_answer(run.id, rec), "rendered": rendered}


def stored_recommendation(session: Session, run_id: int) -> dict[str, Any] | None:
    """The default-options answers stored with the ready run's summary: None unless this policy version computed
    them from the run as it is now (same bytes, ingest and metadata), and None when the stored summary says the
    run's metadata is refused (computing raises the 400 again). Raises 404 / 409 like computing would."""
    run = get_ready_run(session, run_id)
    stored = _fresh(run, SummaryRepository(session).recommendation(run_id, POLICY_VERSION))
    return stored if stored is not None and "json" in stored else None


def _fresh(run: Run, stored: dict[str, Any] | None) -> dict[str, Any] | None:
    """Stored (or just computed) answers when computed from the run as it is now, else None."""
    return stored if isinstance(stored, dict) and stored.get("run") == run_identity(run) else None


def recommendation_answers(factory: sessionmaker[Session], session: Session, run_id: int) -> dict[str, Any] | None:
    """GET /recommendation's answers without options: the stored ones, or when none are stored, those of the run's
    summary computed now (and stored) by `ensure` — or by the computation of it already running in this process
    (the ingest's, right after `ready`). Raises 404 / 409 like computing would, 400 InvalidOverrides when the
    summary says the run's metadata is refused; None when the summary cannot be computed (the caller then
    computes the recommendation itself, and raises what it raises)."""
    run = get_ready_run(session, run_id)
    answers = _fresh(run, SummaryRepository(session).recommendation(run_id, POLICY_VERSION))
    if answers is None:
        try:
            answers = _fresh(run, ensure(factory, run_id)[2])
        except AppError:  # deleted or re-ingested meanwhile: 404 / 409 as computing would
            raise
        except Exception:  # a bug in the summary: logged; the request computes the recommendation as it always did
            log.warning("summary of run %s could not be computed for a read", run_id, exc_info=True)
            return None
    if answers is not None and "refused" in answers:
        raise InvalidOverrides(str(answers["refused"]))
    return answers if answers is not None and "json" in answers else None


def stored_rendering(stored: dict[str, Any] | None, fmt: str) -> RenderedPolicy | None:
    """A rendered format of `stored_recommendation`'s answers, when it holds that format."""
    rendered = (stored or {}).get("rendered", {}).get(fmt)
    return RenderedPolicy(rendered["content"], rendered["media_type"], rendered["filename"]) if rendered else None


def view_analysis(session: Session, run_id: int, overrides: dict[str, float] | None = None) -> dict[str, Any]:
    """The analysis JSON the views derive from (heatmap boxes, layer table): with default thresholds the one
    stored for this policy version (computed, not stored, when missing), else recomputed with `overrides`."""
    if not overrides:
        cached = SummaryRepository(session).analysis(run_id, POLICY_VERSION)
        if cached is not None:
            return cached
    thresholds = Thresholds.from_overrides(overrides) if overrides else Thresholds()
    return {"run_id": run_id, **analyze(load_run_data(session, run_id), thresholds).to_dict()}


def refresh(factory: sessionmaker[Session], run_id: int) -> SummaryRecord:
    """Compute and store the run's summary (its own transactions); see `ensure`."""
    return ensure(factory, run_id)[0]


def ensure(factory: sessionmaker[Session], run_id: int) -> Computed:
    """Compute and store the run's summary and return it; when this process is computing it already (the ingest
    right after `ready`, the background refresher, another reader), wait for that computation and return its
    result (or raise its error) instead."""
    engine = factory.kw["bind"]
    database = id(engine) if is_in_memory(engine) else str(engine.url)  # in-memory: one database per engine

    def compute_and_store() -> Computed:
        with session_scope(factory) as session:
            run, data = load(session, run_id)
        computed = compute(run, data)  # the transaction has ended (the row's attributes stay loaded)
        _store(factory, *computed)
        return computed

    return _RUNNING.get((database, run_id, POLICY_VERSION), compute_and_store)


def _store(
    factory: sessionmaker[Session], record: SummaryRecord, analysis: dict[str, Any], answers: dict[str, Any]
) -> None:
    """Write the summary; when another request or process stored the same run's summary first (both computed it
    at once), theirs stands: it was computed from the same stored data by the same policy version."""
    try:
        with session_scope(factory) as session:
            SummaryRepository(session).put(record, analysis, answers)
    except IntegrityError:
        log.info("summary of run %s was stored concurrently", record.run_id)


def stored_analysis(factory: sessionmaker[Session], run_id: int) -> dict[str, Any]:
    """The default-threshold analysis: stored if this policy version computed it, else computed and stored."""
    with session_scope(factory) as session:
        cached = SummaryRepository(session).analysis(run_id, POLICY_VERSION)
    if cached is not None:
        return cached
    return ensure(factory, run_id)[1]
