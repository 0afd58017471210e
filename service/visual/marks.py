"""What the heatmap marks of a run's recommendation: the skip set, the GEMM overrides, each layer's recommended
precision (the recommendation's headline) and its recipe, with the analysis' layer rows for the boxes.

Belongs here: reading them from `recommendation_for` (default options, or these thresholds) and caching them per
run as it is now (database, id, bytes, finish time) and thresholds, so a repeated render costs no recommendation.
Must not be here: drawing (service/visual/render.py, the web's heatmap_draw.js) or the matrix (actions.py).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from fp8_policy.db.run_models import Run
from fp8_policy.policy.thresholds import Thresholds
from fp8_policy.service.analysis.actions import recommendation_for

_SKIP_CACHE: OrderedDict[tuple[object, ...], Recommended] = OrderedDict()
_SKIP_CACHE_SIZE = 128
_SKIP_LOCK = threading.Lock()


def run_identity(session: Session, run: Run) -> tuple[str, int, str, str]:
    """A stored run as it is now: database, id, uploaded bytes and when its ingest finished."""
    return str(session.get_bind().engine.url), run.id, run.sha256, str(run.finished_at)


@dataclass(frozen=True, slots=True)
class Recommended:
    """What the recommendation (default options) changes: whole layers to BF16 and per-layer GEMM overrides."""

    skip_layers: frozenset[str]
    gemm_overrides: dict[str, tuple[str, ...]]  # layer -> GEMMs kept in high precision
    verdict_rows: tuple[dict[str, Any], ...] | None = None  # its analysis's layer rows (series verdicts)
    thresholds: Thresholds | None = None  # ... and the thresholds that analysis used
    stat_prefix: str | None = None
    precisions: dict[str, str] = field(default_factory=dict)  # layer -> recommended precision (the headline's)
    recipe: str | None = None  # the recommended (outer) recipe


def recommended(session: Session, run: Run, overrides: tuple[tuple[str, float], ...]) -> Recommended:
    """`recommendation_for` with these threshold overrides, cached per run (database, id, bytes, finish time)."""
    key = (*run_identity(session, run), overrides)
    with _SKIP_LOCK:
        if key in _SKIP_CACHE:
            _SKIP_CACHE.move_to_end(key)
            return _SKIP_CACHE[key]
    request = {"thresholds": dict(overrides)} if overrides else None
    rec = recommendation_for(session, run.id, request)
    decision = rec.decision
    result = Recommended(
        frozenset(decision.skip_layers),
        {o.layer: o.gemms for o in decision.gemm_overrides},
        tuple(row.to_dict() for row in rec.layer_rows) if rec.layer_rows else None,
        rec.thresholds,
        rec.stat_prefix,
        dict(rec.headline.get("precision_by_layer") or {}),
        decision.recipe.name,
    )
    with _SKIP_LOCK:
        _SKIP_CACHE[key] = result
        while len(_SKIP_CACHE) > _SKIP_CACHE_SIZE:
            _SKIP_CACHE.popitem(last=False)
    return result
