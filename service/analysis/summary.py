"""A ready run's stored summary: its default analysis and the runs-list columns, computed once per policy version.

Belongs here: what the summary holds (worst severity, the leading finding, how many layers the recommendation
keeps in BF16) and when it is computed — after ingest, or by `SummaryRefresher` in the background for runs whose
summary is missing or was computed by an older `POLICY_VERSION`. The runs list only reads stored summaries
(a list request never analyses a run); GET /analysis with default thresholds serves the stored analysis, and
GET /recommendation without options the stored answers (JSON and rendered) while they are fresh.
SQL is in db/summaries.py.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from fp8_policy.db.models import Run
from fp8_policy.db.session import session_scope
from fp8_policy.db.summaries import SummaryRecord, SummaryRepository
from fp8_policy.policy.analysis import analyze
from fp8_policy.policy.recommend import POLICY_VERSION, Recommendation, RecommendOptions, recommend
from fp8_policy.policy.render import OUTPUT_FORMATS, RenderedPolicy
from fp8_policy.policy.thresholds import Severity, Thresholds
from fp8_policy.service.analysis.actions import load_run_data, recommendation_answer, render_recommendation
from fp8_policy.service.runs.actions import get_ready_run

log = logging.getLogger("fp8_policy.summary")


def compute(session: Session, run_id: int) -> tuple[SummaryRecord, dict[str, Any], dict[str, Any] | None]:
    """Analyse the stored run with default thresholds and recommend as GET /recommendation would: the summary,
    the analysis, and the recommendation's stored answers (None when the run's metadata is refused)."""
    run = get_ready_run(session, run_id)
    data = load_run_data(session, run_id)
    analysis = analyze(data, Thresholds())
    readable = True
    try:
        options = RecommendOptions.from_metadata(data.metadata, {})
    except ValueError:  # metadata the recommender cannot read: the summary uses defaults, the API says why
        options = RecommendOptions.from_metadata({}, {})
        readable = False
    same = options.thresholds == analysis.requested_thresholds  # NVFP4 runs are judged with their own bands
    rec_analysis = analysis if same else analyze(data, options.thresholds)
    rec = recommend(data, rec_analysis, options)
    recommendation = rec.to_dict()
    answers = _answers(run, rec) if readable else None
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
        except Exception:  # noqa: BLE001 - the live path raises it again to the client
            log.info("recommendation of run %s is not stored as %s", run.id, fmt, exc_info=True)
            continue
        rendered[fmt] = {"content": policy.content, "media_type": policy.media_type, "filename": policy.filename}
    return {"run": run_identity(run), "json": recommendation_answer(run.id, rec), "rendered": rendered}


def stored_recommendation(session: Session, run_id: int) -> dict[str, Any] | None:
    """The default-options answers stored with the ready run's summary: None unless this policy version computed
    them from the run as it is now (same bytes, ingest and metadata). Raises 404 / 409 like computing would."""
    run = get_ready_run(session, run_id)
    stored = SummaryRepository(session).recommendation(run_id, POLICY_VERSION)
    if stored is None or stored.get("run") != run_identity(run):
        return None
    return stored


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
    """Compute and store the run's summary (its own transaction)."""
    with session_scope(factory) as session:
        record, analysis, answers = compute(session, run_id)
    _store(factory, record, analysis, answers)
    return record


def _store(
    factory: sessionmaker[Session], record: SummaryRecord, analysis: dict[str, Any], answers: dict[str, Any] | None
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
    with session_scope(factory) as session:
        record, analysis, answers = compute(session, run_id)
    _store(factory, record, analysis, answers)
    return analysis


class SummaryRefresher:
    """One background thread that (re)computes summaries of ready runs, each run at most once at a time.

    `request(ids)` is what the runs list calls for rows without a fresh summary: it returns at once.
    `catch_up()` queues every stale ready run (at start-up, after a policy-version change).
    """

    def __init__(self, factory: sessionmaker[Session], max_pending: int = 10_000) -> None:
        self.factory = factory
        self._queue: queue.Queue[int | None] = queue.Queue(max_pending)
        self._pending: set[int] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="summaries", daemon=True)
        self._thread.start()

    def request(self, run_ids: list[int]) -> None:
        for run_id in run_ids:
            with self._lock:
                if run_id in self._pending:
                    continue
                self._pending.add(run_id)
            try:
                self._queue.put_nowait(run_id)
            except queue.Full:  # the backlog is already long: this run is picked up on a later request
                with self._lock:
                    self._pending.discard(run_id)

    def catch_up(self) -> None:
        with session_scope(self.factory) as session:
            stale = SummaryRepository(session).stale_ready_runs(POLICY_VERSION)
        self.request(stale)

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """True once nothing is pending (tests and the demo loader)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._pending:
                    return True
            time.sleep(0.02)
        return False

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while True:
            run_id = self._queue.get()
            if run_id is None:
                return
            try:
                refresh(self.factory, run_id)
            except Exception:  # a run deleted or not ready meanwhile, or a bug: logged, the list shows no summary
                log.exception("summary of run %s could not be computed", run_id)
            finally:
                with self._lock:
                    self._pending.discard(run_id)
