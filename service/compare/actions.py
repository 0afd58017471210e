"""Compare 2-8 runs (GET /api/v1/compare/runs, /compare/series, /compare/scalars): load each run's stored analysis
and default recommendation, hand them to policy/compare/runs.py; one metric of every run on one iteration axis
(policy/compare/overlay.py) for the overlay chart, a layer's stat or a training scalar such as the loss.

The run selection (`runs=3,5,9`, or `runs` repeated) is checked whole before anything is read: fewer than 2,
more than 8 or a repeated id is a 400 `InvalidRunSelection`; ids with no run are one 404 naming all of them; runs
that are not ready one 409 naming each with its status. The order given is the order shown (the first run is the
reference, as `base` is in the two-run compare).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from sqlalchemy.orm import Session, sessionmaker

from fp8_policy.db.codec import decode_iterations, decode_values
from fp8_policy.db.run_models import Run, RunStatus
from fp8_policy.db.runs import RunRepository
from fp8_policy.policy.compare.overlay import align, max_over_ranks
from fp8_policy.policy.compare.runs import MAX_RUNS, MIN_RUNS, RunVerdict, compare_verdicts
from fp8_policy.policy.live import scalar_events
from fp8_policy.policy.recommend import POLICY_VERSION
from fp8_policy.policy.records import nonfinite_text
from fp8_policy.service import lanes, limits
from fp8_policy.service.analysis import summary
from fp8_policy.service.analysis.actions import recommendation_answer, recommendation_for
from fp8_policy.service.analysis.recommendation_cache import recommendation_key
from fp8_policy.service.errors import InvalidOverrides, InvalidParameter, InvalidRunSelection, NotFound, NotReady
from fp8_policy.service.runs.actions import run_read
from fp8_policy.service.scalars import actions as scalars
from fp8_policy.service.single_flight import SingleFlightCache

RUN_FIELDS = frozenset(
    {"id", "name", "project", "tags", "status", "created_at", "ranks", "layer_count", "points"}
    | {"iteration_min", "iteration_max"}
)  # of RunRead: what the compare page shows of each run
MAX_IDS_TEXT = 200  # characters of the `runs` parameter: 8 ids of up to 18 digits and their commas fit


def parse_run_ids(values: Sequence[str]) -> list[int]:
    """The `runs` parameter (comma-separated, or repeated) as 2-8 distinct run ids, in the order given."""
    if not values:
        raise InvalidRunSelection(f"missing parameter 'runs': {MIN_RUNS}-{MAX_RUNS} run ids, comma-separated")
    text = ",".join(values)
    if len(text) > MAX_IDS_TEXT:
        raise InvalidRunSelection(f"runs takes at most {MAX_RUNS} run ids ({len(text)} characters given)")
    tokens = [token.strip() for token in text.split(",")]
    bad = [token for token in tokens if not (token.isascii() and token.isdigit()) or len(token) > 18]
    if bad:
        raise InvalidRunSelection(f"runs must be run ids (positive integers), comma-separated; got {bad[0]!r}")
    ids = [int(token) for token in tokens]
    if len(ids) < MIN_RUNS:
        raise InvalidRunSelection(f"compare takes {MIN_RUNS}-{MAX_RUNS} runs; got {len(ids)}: add another run")
    if len(ids) > MAX_RUNS:
        raise InvalidRunSelection(f"compare takes at most {MAX_RUNS} runs; got {len(ids)}: leave some out")
    repeated = sorted({run_id for run_id in ids if ids.count(run_id) > 1})
    if repeated:
        raise InvalidRunSelection(f"run(s) {', '.join(map(str, repeated))} given more than once; name each run once")
    return ids


def ready_runs(session: Session, ids: Sequence[int]) -> list[Run]:
    """The runs, in order; one 404 for every id without a run, then one 409 for every run not ready."""
    repo = RunRepository(session)
    runs = {run_id: repo.get(run_id) for run_id in ids if 1 <= run_id <= limits.MAX_ROW_ID}
    missing = [run_id for run_id in ids if runs.get(run_id) is None]
    if missing:
        raise NotFound(f"no run {', '.join(map(str, missing))}")
    found = [runs[run_id] for run_id in ids]
    waiting = [run for run in found if run is not None and run.status != RunStatus.ready]
    if waiting:
        listed = "; ".join(
            f"run {run.id} is {run.status}" + (f" ({run.error[:200]})" if run.error else "") for run in waiting
        )
        raise NotReady(
            f"only ready runs can be compared: {listed}; compare them once they are ready, or leave them out"
        )
    return [run for run in found if run is not None]


# ------------------------------------------------------------------------------------------------ verdicts
def compare_runs(
    session: Session, factory: sessionmaker[Session], cache: SingleFlightCache[Any], ids: Sequence[int]
) -> dict[str, Any]:
    """GET /api/v1/compare/runs: every run's identity and verdict, the side-by-side table, per-layer precisions."""
    runs = ready_runs(session, ids)
    verdicts = [_verdict(session, factory, cache, run) for run in runs]
    body = compare_verdicts(verdicts)
    repo = RunRepository(session)
    metrics: dict[tuple[str, str], int] = {}
    for run in runs:
        for key in repo.metric_keys(run.id):
            metrics[key] = metrics.get(key, 0) + 1
    body["runs"] = [
        {
            **{k: v for k, v in run_read(run).model_dump().items() if k in RUN_FIELDS},
            "severity": verdict.severity,
            "findings": [
                {
                    "pattern": f.pattern,
                    "label": f.label,
                    "severity": f.severity,
                    "layers": f.layers,
                    "summary": f.summary,
                }
                for f in verdict.findings
            ],
            "trained_recipe": verdict.trained_recipe,
            "recommendation_note": verdict.policy_note,
        }
        for run, verdict in zip(runs, verdicts, strict=True)
    ]
    body["metrics"] = [
        {"tensor": tensor, "stat": stat, "runs": count} for (tensor, stat), count in sorted(metrics.items())
    ]
    body["policy_version"] = POLICY_VERSION
    return body


def _verdict(session: Session, factory: sessionmaker[Session], cache: SingleFlightCache[Any], run: Run) -> RunVerdict:
    """The run's default analysis and recommendation: the ones stored with its summary when fresh, else computed
    (and the recommendation kept in the app's cache, shared with GET /recommendation)."""
    analysis = summary.stored_analysis(factory, run.id)
    note = None
    answer: dict[str, Any] | None
    stored = summary.stored_recommendation(session, run.id)
    if stored is not None:
        answer = stored["json"]
    else:
        try:
            rec = cache.get(
                recommendation_key(session, run.id, {}),
                lambda: recommendation_for(session, run.id, {}),
                admit=lanes.ANALYSIS.admission,
            )
            answer = recommendation_answer(run.id, rec)
        except InvalidOverrides as exc:  # metadata the recommender refuses: the run is compared without one
            answer, note = None, f"no recommendation: {exc.detail}"
    return RunVerdict.from_json(run.id, run.name, analysis, answer, note)


# ------------------------------------------------------------------------------------------------ overlays
def compare_series(session: Session, ids: Sequence[int], layer: str, tensor: str, stat: str) -> dict[str, Any]:
    """GET /api/v1/compare/series: one layer's tensor stat of every run (max over ranks), on one iteration axis."""
    limits.check_filters(layer=layer, tensor=tensor, stat=stat)
    runs = ready_runs(session, ids)
    repo = RunRepository(session)
    series: list[tuple[np.ndarray, np.ndarray] | None] = []
    missing: list[str | None] = []
    for run in runs:
        rows = repo.series(run.id, layer=layer, tensor=tensor, stat_key=stat, rank=None)
        if not rows:
            has_layer = any(found.name == layer for found in repo.layers(run.id))
            series.append(None)
            missing.append(f"no {tensor} {stat} logged for this layer" if has_layer else "the run has no such layer")
            continue
        series.append(max_over_ranks([(decode_iterations(s.iterations), decode_values(s.values)) for s, _ in rows]))
        missing.append(None)
    if all(s is None for s in series):
        raise NotFound(f"none of runs {', '.join(map(str, ids))} logged {layer!r} / {tensor!r} / {stat!r}")
    return {"layer": layer, "tensor": tensor, "stat": stat, **_overlay(runs, series, missing)}


def compare_scalars(
    session: Session, read: Callable[[Run], dict[str, Any]], ids: Sequence[int], name: str
) -> dict[str, Any]:
    """GET /api/v1/compare/scalars: one training scalar (loss by default) of every run on one step axis; `read`
    is the runs' scalar store (service/scalars/actions.py `scalar_series`), so a run that recorded none says so."""
    if name not in scalar_events.SCALAR_KEYS:
        raise InvalidParameter(f"name must be one of {', '.join(scalar_events.SCALAR_KEYS)}; got {name!r}")
    runs = ready_runs(session, ids)
    series: list[tuple[np.ndarray, np.ndarray] | None] = []
    missing: list[str | None] = []
    recorded: list[list[str]] = []
    for run in runs:
        data = read(run)
        found = data.get("series") or {}
        recorded.append([key for key in scalar_events.SCALAR_KEYS if key in found])
        entry = found.get(name)
        if entry and entry.get("steps"):
            series.append((np.asarray(entry["steps"], dtype=np.int64), np.asarray(entry["values"], dtype=np.float64)))
            missing.append(None)
        else:
            series.append(None)
            missing.append(f"no {name} recorded" if recorded[-1] else "no training scalars recorded")
    body = {"name": name, **_overlay(runs, series, missing)}
    for entry, names in zip(body["runs"], recorded, strict=True):
        entry["recorded"] = names
    return body


def scalar_reader(store: Any, data_dir: Any, limit: int = 100_000) -> Callable[[Run], dict[str, Any]]:
    return lambda run: scalars.scalar_series(store, data_dir, run, limit)


def _overlay(
    runs: Sequence[Run], series: list[tuple[np.ndarray, np.ndarray] | None], missing: list[str | None]
) -> dict[str, Any]:
    overlay = align(series)
    return {
        "iterations": overlay.iterations,
        "grouped": overlay.grouped,
        "runs": [
            {"id": run.id, "name": run.name, "points": points, "missing": why, "values": [_json(v) for v in values]}
            for run, values, points, why in zip(runs, overlay.values, overlay.points, missing, strict=True)
        ],
    }


def _json(value: float | None) -> float | str | None:
    if value is None or math.isfinite(value):
        return value
    return nonfinite_text(value)
