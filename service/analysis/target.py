"""`?target=speedup:<x>|risk:<x>` on a recommendation: parsing it (400 on junk) and re-solving a computed
recommendation on its frontier (409 when the run has no loss-sensitivity statistics); policy/recommend/target.py
decides, this module only maps its refusals to HTTP errors."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy.orm import Session

from fp8_policy.policy.recommend import Recommendation
from fp8_policy.policy.recommend.target import NoFrontier, Target, TargetError, parse_target, retarget
from fp8_policy.service.analysis import actions
from fp8_policy.service.analysis.recommendation_cache import recommendation_key
from fp8_policy.service.errors import InvalidTarget, NoSensitivity
from fp8_policy.service.single_flight import SingleFlightCache


def parse(text: object) -> Target:
    try:
        return parse_target(text)
    except TargetError as exc:
        raise InvalidTarget(str(exc)) from exc


def apply(rec: Recommendation, target: Target) -> Recommendation:
    if rec.context is None:
        raise NoSensitivity("this recommendation has no frontier to re-solve on")
    try:
        return retarget(rec, rec.context, target)
    except NoFrontier as exc:
        raise NoSensitivity(str(exc)) from exc


def split_target(overrides: dict[str, Any]) -> tuple[dict[str, Any], Target | None]:
    """The overrides without `target`, and the target parsed (400 InvalidTarget on junk)."""
    rest = dict(overrides)
    return rest, parse(rest.pop("target")) if "target" in rest else None


def keys(
    session: Session, run_id: int, overrides: dict[str, Any], budget: Target | None
) -> tuple[tuple[object, ...], tuple[object, ...]]:
    """(the untargeted recommendation's cache key, this request's): a target re-solves the cached recommendation."""
    base = recommendation_key(session, run_id, overrides)
    return base, (*base, "target", budget.text) if budget is not None else base


def cached(
    cache: SingleFlightCache[Any],
    session: Session,
    run_id: int,
    overrides: dict[str, Any],
    budget: Target | None,
    admit: Callable[[], AbstractContextManager[object]] | None = None,
) -> Recommendation:
    """The recommendation for `overrides` (computed once per key), re-solved for `budget` when given; `admit`: the
    analysis lane's admission a computation holds (service/lanes.py)."""
    base_key, key = keys(session, run_id, overrides, budget)
    rec: Recommendation = cache.get(base_key, lambda: actions.recommendation_for(session, run_id, overrides), admit)
    if budget is not None:
        rec = cache.get(key, lambda: apply(rec, budget), admit)
    return rec
