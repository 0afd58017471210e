"""`?target=speedup:<x>|risk:<x>` on a recommendation: parsing it (400 on junk) and re-solving a computed
recommendation on its frontier (409 when the run has no loss-sensitivity statistics); policy/recommend/target.py
decides, this module only maps its refusals to HTTP errors."""

from __future__ import annotations

from fp8_policy.policy.recommend import Recommendation
from fp8_policy.policy.recommend.target import NoFrontier, Target, TargetError, parse_target, retarget
from fp8_policy.service.errors import BadRequest, Conflict


class InvalidTarget(BadRequest):
    """400: `target` is not speedup:<x> (1-10) or risk:<x> (0-1e6 nats per step)."""


class NoSensitivity(Conflict):
    """409: the run has no frontier to re-solve on (no loss-sensitivity statistics)."""


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
