"""The checks of a posted experiment (`POST /api/v1/runs/{id}/experiments`), before anything is stored.

Body: `{"name"?, "run_id"?, "project"?, "seed"?, "seeds"?, "tolerance"?, "setup"?, "arms": [...]}`; each arm
`{"name", "kind": bf16|all_low|rule|recommended|frontier, "steps", "heldout_loss", "heldout_losses"?, "step_time_s",
"train_loss"?, "rule"?, "frontier_point"?, "precisions"? {layer: precision}, "default_precision"?, "bf16_gemms"?
{layer: [gemm]}}`.
Replicates: an arm may carry `heldout_losses` (2 to `MAX_REPLICATES` held-out losses, replicate r of every arm trained
under the same seed and data order); its `heldout_loss` may then be left out and is their mean (it must equal the
mean, relative `MEAN_RTOL`, when given). Either every arm carries `heldout_losses` of the same length or none does;
`seeds` (the replicate seeds) has that length too.
Refused with a 400 (nothing stored): another run or project (`run_id` / `project` not this run's, or `precisions`
naming layers the run does not have: `ExperimentForOtherRun`), arms with unequal steps (`UnequalSteps`), replicates
that do not line up (`UnequalReplicates`: some arms with `heldout_losses` and some without, unequal lengths, `seeds`
of another length), a non-finite number where a number is required (`NonFiniteNumber`: steps, step_time_s,
tolerance, seed, seeds, frontier_point), and anything else malformed (`InvalidExperiment`). A held-out or train loss
that is NaN or infinite is a diverged arm, a result: kept as `diverged: true` with the loss null (JSON and PostgreSQL
hold no NaN); so is an arm with a NaN or infinite loss in any replicate (that replicate's loss kept as null).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fp8_policy.policy.recommend.frontier import RULES
from fp8_policy.policy.recommend.verification import KINDS
from fp8_policy.policy.records import PRECISIONS
from fp8_policy.service.errors import (
    ExperimentForOtherRun,
    InvalidExperiment,
    NonFiniteNumber,
    UnequalReplicates,
    UnequalSteps,
)

MAX_ARMS = 16
MAX_NAME_CHARS = 100
MAX_PRECISIONS = 50_000  # layer entries over all arms
MAX_SETUP_KEYS = 32
MAX_TEXT_CHARS = 500
MAX_STEPS = 10**9
MAX_REPLICATES = 32
MEAN_RTOL = 1e-6
ARM_KEYS = frozenset(
    {"name", "kind", "steps", "heldout_loss", "step_time_s", "train_loss", "rule", "frontier_point", "precisions"}
    | {"default_precision", "bf16_gemms", "heldout_losses"}
)
BODY_KEYS = frozenset({"name", "run_id", "project", "seed", "seeds", "tolerance", "setup", "arms", "steps"})


@dataclass(frozen=True)
class Experiment:
    name: str
    steps: int
    seed: int | None
    tolerance: float | None
    setup: dict[str, Any]
    arms: list[dict[str, Any]]
    seeds: list[int] | None = None  # the replicate seeds
    replicates: int = 1


def _text(value: object, what: str, limit: int = MAX_NAME_CHARS) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise InvalidExperiment(f"{what} must be a non-empty string of at most {limit} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InvalidExperiment(f"{what} must hold no control characters")
    return value.strip()


def _number(value: object, what: str, *, integer: bool = False, low: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidExperiment(f"{what} must be a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise NonFiniteNumber(f"{what} must be a finite number, got {value}")
    if integer and value != int(value):
        raise InvalidExperiment(f"{what} must be an integer, got {value}")
    if low is not None and value < low:
        raise InvalidExperiment(f"{what} must be at least {low:g}, got {value}")
    return float(value)


def _loss(value: object, what: str) -> tuple[float | None, bool]:
    """(loss, diverged): NaN / +-inf / the strings "NaN", "Infinity", "-Infinity" mean diverged."""
    if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
        return None, True
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidExperiment(f"{what} must be a number (NaN or Infinity for a diverged arm)")
    return (float(value), False) if math.isfinite(value) else (None, True)


def parse_experiment(body: Any, run_id: int, project: str, layers: set[str]) -> Experiment:
    if not isinstance(body, dict):
        raise InvalidExperiment("the body must be a JSON object with `arms`")
    unknown = sorted(set(body) - BODY_KEYS)
    if unknown:
        raise InvalidExperiment(f"unknown keys {unknown}; expected some of {sorted(BODY_KEYS)}")
    if "run_id" in body and (isinstance(body["run_id"], bool) or body["run_id"] != run_id):
        raise ExperimentForOtherRun(f"the experiment names run {body['run_id']!r}; it was posted to run {run_id}")
    if "project" in body and body["project"] != project:
        raise ExperimentForOtherRun(f"the experiment names project {body['project']!r}; run {run_id} is in {project!r}")
    arms_in = body.get("arms")
    if not isinstance(arms_in, list) or not 2 <= len(arms_in) <= MAX_ARMS:
        raise InvalidExperiment(f"arms must be a list of 2 to {MAX_ARMS} arms")
    arms = [_arm(arm, i, layers) for i, arm in enumerate(arms_in)]
    names = [a["name"] for a in arms]
    if len(set(names)) != len(names):
        raise InvalidExperiment("arm names must be unique")
    if sum(len(a.get("precisions") or {}) for a in arms) > MAX_PRECISIONS:
        raise InvalidExperiment(f"at most {MAX_PRECISIONS} layer precisions over all arms")
    steps = {a["steps"] for a in arms}
    declared = int(_number(body["steps"], "steps", integer=True, low=1)) if "steps" in body else None
    if len(steps) != 1 or (declared is not None and steps != {declared}):
        raise UnequalSteps(
            "every arm must train the same steps from the same state: got "
            + ", ".join(f"{a['name']}={a['steps']}" for a in arms)
            + (f" (the experiment says {declared})" if declared is not None else "")
        )
    replicates, seeds = _replicates(body, arms)
    if sum(a["kind"] == "bf16" for a in arms) != 1:
        raise InvalidExperiment("exactly one arm must be the bf16 reference (kind bf16)")
    setup = body.get("setup", {})
    if not isinstance(setup, dict) or len(setup) > MAX_SETUP_KEYS:
        raise InvalidExperiment(f"setup must be an object of at most {MAX_SETUP_KEYS} keys")
    for key, value in setup.items():
        _text(key, "a setup key")
        if isinstance(value, str):
            _text(value, f"setup.{key}", MAX_TEXT_CHARS)
        elif value is not None:
            _number(value, f"setup.{key}")
    tolerance = _number(body["tolerance"], "tolerance", low=0) if body.get("tolerance") is not None else None
    if tolerance is not None and tolerance > 10:
        raise InvalidExperiment("tolerance must be at most 10 nats")
    seed = int(_number(body["seed"], "seed", integer=True)) if body.get("seed") is not None else None
    name = _text(body.get("name", "experiment"), "name", 200)
    return Experiment(name, steps.pop(), seed, tolerance, dict(setup), arms, seeds, replicates)


def _replicates(body: dict[str, Any], arms: list[dict[str, Any]]) -> tuple[int, list[int] | None]:
    """The replicate count (1 without `heldout_losses`) and the checked `seeds` (module docstring)."""
    counts = {len(a["heldout_losses"]) if "heldout_losses" in a else 1 for a in arms}
    if len(counts) != 1:
        raise UnequalReplicates(
            "either every arm carries heldout_losses of the same length (replicate r of every arm trained under the "
            "same seed) or none does: got "
            + ", ".join(f"{a['name']}={len(a['heldout_losses']) if 'heldout_losses' in a else 'none'}" for a in arms)
        )
    replicates = counts.pop()
    if body.get("seeds") is None:
        return replicates, None
    given = body["seeds"]
    if not isinstance(given, list):
        raise InvalidExperiment("seeds must be a list of integers, one per replicate")
    seeds = [int(_number(v, f"seeds[{i}]", integer=True)) for i, v in enumerate(given)]
    if replicates < 2 or len(seeds) != replicates:
        raise UnequalReplicates(
            f"seeds must hold one seed per replicate: got {len(seeds)} seeds for "
            + (f"{replicates} replicates" if replicates > 1 else "arms without heldout_losses")
        )
    return replicates, seeds


def _arm(arm: Any, index: int, layers: set[str]) -> dict[str, Any]:
    where = f"arms[{index}]"
    if not isinstance(arm, dict):
        raise InvalidExperiment(f"{where} must be an object")
    unknown = sorted(set(arm) - ARM_KEYS)
    if unknown:
        raise InvalidExperiment(f"{where}: unknown keys {unknown}")
    for key in ("name", "kind", "steps", "step_time_s"):
        if key not in arm:
            raise InvalidExperiment(f"{where} needs {key}")
    if "heldout_loss" not in arm and "heldout_losses" not in arm:
        raise InvalidExperiment(f"{where} needs heldout_loss (or heldout_losses, one per replicate)")
    out: dict[str, Any] = {"name": _text(arm["name"], f"{where}.name")}
    if arm["kind"] not in KINDS:
        raise InvalidExperiment(f"{where}.kind must be one of {', '.join(KINDS)}")
    out["kind"] = arm["kind"]
    out["steps"] = int(_number(arm["steps"], f"{where}.steps", integer=True, low=1))
    if out["steps"] > MAX_STEPS:
        raise InvalidExperiment(f"{where}.steps must be at most {MAX_STEPS}")
    if "heldout_losses" in arm:
        out["heldout_losses"], out["heldout_loss"], out["diverged"] = _replicated(arm, where)
    else:
        out["heldout_loss"], out["diverged"] = _loss(arm["heldout_loss"], f"{where}.heldout_loss")
    out["step_time_s"] = _number(arm["step_time_s"], f"{where}.step_time_s", low=0)
    if arm.get("train_loss") is not None:
        out["train_loss"], _ = _loss(arm["train_loss"], f"{where}.train_loss")
    if arm.get("rule") is not None:
        if arm["rule"] not in RULES:
            raise InvalidExperiment(f"{where}.rule must be one of {', '.join(RULES)}")
        out["rule"] = arm["rule"]
    if arm.get("frontier_point") is not None:
        out["frontier_point"] = int(_number(arm["frontier_point"], f"{where}.frontier_point", integer=True, low=0))
    for key in ("default_precision",):
        if arm.get(key) is not None:
            if arm[key] not in PRECISIONS:
                raise InvalidExperiment(f"{where}.{key} must be one of {', '.join(PRECISIONS)}")
            out[key] = arm[key]
    precisions = arm.get("precisions")
    if precisions is not None:
        if not isinstance(precisions, dict):
            raise InvalidExperiment(f"{where}.precisions must be an object {{layer: precision}}")
        bad = [p for p in precisions.values() if p not in PRECISIONS]
        if bad:
            raise InvalidExperiment(f"{where}.precisions: {bad[0]!r} is not one of {', '.join(PRECISIONS)}")
        foreign = sorted(name for name in precisions if name not in layers)
        if foreign:
            raise ExperimentForOtherRun(
                f"{where}.precisions names {len(foreign)} layer(s) this run does not have, e.g. {foreign[0]!r}: "
                "was the experiment made for another model?"
            )
        out["precisions"] = dict(precisions)
    overrides = arm.get("bf16_gemms")
    if overrides is not None:
        if not isinstance(overrides, dict) or any(
            not isinstance(g, list) or not set(g) <= {"fprop", "dgrad", "wgrad"} for g in overrides.values()
        ):
            raise InvalidExperiment(f"{where}.bf16_gemms must be an object {{layer: [fprop|dgrad|wgrad, ...]}}")
        foreign = sorted(name for name in overrides if name not in layers)
        if foreign:
            raise ExperimentForOtherRun(f"{where}.bf16_gemms names a layer this run does not have: {foreign[0]!r}")
        out["bf16_gemms"] = {name: list(gemms) for name, gemms in overrides.items()}
    return out


def _replicated(arm: dict[str, Any], where: str) -> tuple[list[float | None], float | None, bool]:
    """(per-replicate losses, their mean, diverged): a non-finite replicate is null and makes the arm diverged."""
    given = arm["heldout_losses"]
    if not isinstance(given, list) or not 2 <= len(given) <= MAX_REPLICATES:
        raise InvalidExperiment(f"{where}.heldout_losses must be a list of 2 to {MAX_REPLICATES} held-out losses")
    parsed = [_loss(v, f"{where}.heldout_losses[{i}]") for i, v in enumerate(given)]
    losses = [loss for loss, _ in parsed]
    diverged = any(bad for _, bad in parsed)
    mean = None if diverged else math.fsum(v for v in losses if v is not None) / len(losses)
    if arm.get("heldout_loss") is not None:
        stated, stated_diverged = _loss(arm["heldout_loss"], f"{where}.heldout_loss")
        agrees = stated_diverged if mean is None else (
            stated is not None and math.isclose(stated, mean, rel_tol=MEAN_RTOL, abs_tol=1e-12)
        )  # fmt: skip
        if not agrees:
            raise InvalidExperiment(
                f"{where}.heldout_loss {arm['heldout_loss']} must be the mean of its heldout_losses "
                f"({'diverged' if mean is None else f'{mean:.9g}'}); leave it out to have it computed"
            )
    return losses, mean, diverged
