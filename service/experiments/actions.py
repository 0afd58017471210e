"""Use cases behind experiments: store a posted one (checked, placed on the run's frontier, judged), list a run's,
and the newest verdict and measured arms the recommendation and the frontier chart show.

The frontier an experiment is placed on is the run's default recommendation (no options), taken from the same
cache the recommendation routes use (service/analysis/target.py `cached`); the verdict is computed when posted and
kept with the experiment, so reading it costs one indexed query.

With replicates (`heldout_losses` on every arm) each stored arm also keeps `heldout_gaps` (replicate r minus the BF16
arm's replicate r; null where either diverged) and `gap_se` (the standard error of its mean gap; null with a
diverged replicate); experiments stored before replicates existed have neither and read as before.
"""

from __future__ import annotations

import json
import math
from typing import Any

from sqlalchemy.orm import Session

from fp8_policy.db.experiments import ExperimentRepository
from fp8_policy.db.runs import RunRepository
from fp8_policy.policy.recommend import Recommendation
from fp8_policy.policy.recommend.replicates import paired
from fp8_policy.policy.recommend.verification import GAP_TOLERANCE, place_arms, verify
from fp8_policy.service.analysis import target
from fp8_policy.service.analysis.frontier_schemas import VerificationRead
from fp8_policy.service.experiments.validate import parse_experiment
from fp8_policy.service.runs.actions import get_ready_run
from fp8_policy.service.single_flight import SingleFlightCache

GEMM_RISK_KEYS = ("gemm_speedup", "predicted_risk")


def _round(value: float | None, digits: int = 6) -> float | None:
    return None if value is None or not math.isfinite(value) else float(f"{value:.{digits}g}")


def post_experiment(
    session: Session, cache: SingleFlightCache[Any], run_id: int, body: Any, uploaded_by: str | None
) -> dict[str, Any]:
    run = get_ready_run(session, run_id)
    layers = {layer.name for layer in RunRepository(session).layers(run_id)}
    experiment = parse_experiment(body, run_id, run.project, layers)
    rec = target.cached(cache, session, run_id, {}, None)
    recommended = {r.layer: r.precision for r in rec.ladder.rungs} if rec.ladder is not None else {}
    frontier = rec.frontier
    placed = place_arms(experiment.arms, frontier, recommended) if frontier is not None else list(experiment.arms)
    for arm in placed:  # what the next step ranks: the layers the arm ran in low precision
        assignment = (
            recommended if arm["kind"] == "recommended" and not arm.get("precisions") else arm.get("precisions")
        )
        arm["assignment"] = assignment or {}
    verdict = verify(placed, _risks(rec), experiment.tolerance if experiment.tolerance is not None else GAP_TOLERANCE)
    arms = [_stored(arm, placed) for arm in placed]
    stored = {
        "setup": experiment.setup,
        "seed": experiment.seed,
        **({"seeds": experiment.seeds} if experiment.seeds is not None else {}),
        "tolerance": experiment.tolerance,
        "arms": arms,
        "verification": {k: (_round(v) if isinstance(v, float) else v) for k, v in verdict.items()},
        "recommendation": {"policy_version": rec.policy_version},
    }
    row = ExperimentRepository(session).add(run_id, experiment.name, experiment.steps, uploaded_by, stored)
    return read(row)


def _risks(rec: Recommendation) -> dict[str, dict[str, float]]:
    context = rec.context
    if context is None:
        return {}
    table = context.table
    return {
        layer: {p: r / 1e6 for p in table.precisions(layer) if (r := table.risk(layer, p)) is not None}
        for layer in table.layers()
    }


def _stored(arm: dict[str, Any], placed: list[dict[str, Any]]) -> dict[str, Any]:
    reference = next(a for a in placed if a["kind"] == "bf16")
    base = reference.get("heldout_loss")
    gap = arm["heldout_loss"] - base if arm.get("heldout_loss") is not None and base is not None else None
    out = {k: v for k, v in arm.items() if k not in ("assignment", *GEMM_RISK_KEYS)}
    out["heldout_gap"] = _round(gap)
    if arm.get("heldout_losses") is not None and reference.get("heldout_losses") is not None:
        gaps = [
            v - b if v is not None and b is not None else None
            for v, b in zip(arm["heldout_losses"], reference["heldout_losses"], strict=True)
        ]
        out["heldout_gaps"] = [_round(g) for g in gaps]
        finite = [g for g in gaps if g is not None]
        out["gap_se"] = _round(paired(finite).se) if len(finite) == len(gaps) else None
    out["gemm_speedup"] = _round(arm.get("gemm_speedup"), 5)
    out["predicted_risk"] = _round(arm.get("predicted_risk"))
    return out


def read(row: Any) -> dict[str, Any]:
    body = row.body
    return {
        "id": row.id,
        "run_id": row.run_id,
        "name": row.name,
        "steps": row.steps,
        "uploaded_by": row.uploaded_by,
        "created_at": row.created_at,
        "setup": body.get("setup", {}),
        "seed": body.get("seed"),
        "seeds": body.get("seeds"),
        "tolerance": body.get("tolerance"),
        "arms": body.get("arms", []),
        "verification": {**body.get("verification", {}), "experiment_id": row.id},
    }


def list_experiments(session: Session, run_id: int) -> list[dict[str, Any]]:
    get_ready_run(session, run_id)
    return [read(row) for row in ExperimentRepository(session).of_run(run_id)]


def newest_experiment_id(session: Session, run_id: int) -> int | None:
    return ExperimentRepository(session).newest_id(run_id)


def verification_for(session: Session, run_id: int) -> dict[str, Any] | None:
    """The newest experiment's verdict with its measured arms (for the recommendation's `verification`)."""
    row = ExperimentRepository(session).newest(run_id)
    if row is None:
        return None
    stored = read(row)
    measured = [
        {"experiment_id": row.id, **{k: arm.get(k) for k in ("name", "kind", "heldout_gap", "gap_se", *GEMM_RISK_KEYS)}}
        for arm in stored["arms"]
    ]
    return {**stored["verification"], "measured": measured}


def measured_arms(session: Session, run_id: int, rec: Recommendation) -> list[dict[str, Any]]:
    """The newest experiment's arms for the frontier chart (name, held-out gap, speedup, predicted risk)."""
    found = verification_for(session, run_id)
    return list(found["measured"]) if found is not None else []


def with_verification(session: Session, run_id: int, body: bytes) -> bytes:
    """The recommendation's JSON `body` with the newest experiment's `verification` added (unchanged without one)."""
    found = verification_for(session, run_id)
    if found is None:
        return body
    answer = json.loads(body)
    answer["verification"] = VerificationRead.model_validate(found).model_dump(mode="json", by_alias=True)
    return json.dumps(answer, separators=(",", ":")).encode()
