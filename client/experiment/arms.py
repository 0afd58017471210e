"""The arms a recommendation implies, as per-layer precisions (plain data: no torch).

From the recommendation JSON (`GET .../recommendation`): `bf16` (every layer BF16), `all_low` (every layer the
ladder lists at the recommended recipe; layers that ran in BF16 stay BF16), one arm per rule baseline of the
`frontier` (`last_15pct`, `last_n_nvidia`, `first_last`; identical assignments trained once and named together),
`recommended` (the ladder's rungs, its GEMM overrides as `bf16_gemms`), and `frontier` points by index (or the
answer of a `target`). `experiment_body` turns measured arms into the body of `POST .../experiments` (replicated rows from
`replicates.run_replicates`: each arm's `heldout_losses` and the replicate `seeds` too).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_ARMS = ("bf16", "all_low", "rules", "recommended")


@dataclass(frozen=True)
class Arm:
    name: str
    kind: str  # bf16 | all_low | rule | recommended | frontier
    precisions: dict[str, str]
    bf16_gemms: dict[str, list[str]] = field(default_factory=dict)
    rule: str | None = None
    frontier_point: int | None = None
    also: tuple[str, ...] = ()  # other rule names with the same assignment (trained once)

    def key(self) -> tuple[object, ...]:
        return (
            tuple(sorted(self.precisions.items())),
            tuple(sorted((k, tuple(v)) for k, v in self.bf16_gemms.items())),
        )


def _ladder(policy: Mapping[str, Any]) -> dict[str, str]:
    ladder = policy.get("precision_ladder") or {}
    rungs = {name: row["precision"] for name, row in (ladder.get("layers") or {}).items()}
    if not rungs:
        raise ValueError("the recommendation has no precision_ladder: nothing to train arms from")
    return rungs


def _replay(frontier: Mapping[str, Any], rungs: Mapping[str, str], index: int) -> dict[str, str]:
    """The assignment of frontier point `index`: from all-BF16 (point 0), apply each point's moves."""
    points = frontier.get("points") or []
    if not 0 <= index < len(points):
        raise ValueError(f"frontier point {index} does not exist ({len(points)} points)")
    assignment = dict.fromkeys(rungs, "bf16")
    for point in points[1 : index + 1]:
        for move in point["layers_changed"]:
            assignment[move["layer"]] = move["to"]
    unmeasured = set(frontier.get("unmeasured_layers") or ())
    return {n: rungs[n] if n in unmeasured else p for n, p in assignment.items()}


def arms_from_recommendation(
    policy: Mapping[str, Any],
    include: Iterable[str] = DEFAULT_ARMS,
    frontier_points: Sequence[int] = (),
    extra: Sequence[tuple[str, Mapping[str, Any]]] = (),
) -> list[Arm]:
    """The arms to train (module docstring); `extra`: (name, a recommendation answered for a `target`) pairs,
    trained as `recommended` arms too. Arms with the same assignment are merged (the first name kept)."""
    include = set(include)
    rungs = _ladder(policy)
    frontier = policy.get("frontier") or {}
    low = frontier.get("low_precision") or policy["recipe"]["name"]
    baselines = {b["name"]: set(b["bf16_layers"]) for b in frontier.get("baselines") or []}
    ran_bf16 = baselines.get("all_low", set())  # the all-low rule keeps only the layers that ran in BF16
    arms: list[Arm] = []
    if "bf16" in include:
        arms.append(Arm("bf16", "bf16", dict.fromkeys(rungs, "bf16")))
    if "all_low" in include:
        arms.append(Arm(f"all_{low}", "all_low", {n: "bf16" if n in ran_bf16 else low for n in rungs}))
    if "rules" in include:
        for base in frontier.get("baselines") or []:
            if base["name"] == "all_low":
                continue
            bf16 = set(base["bf16_layers"])
            arms.append(Arm(base["name"], "rule", {n: "bf16" if n in bf16 else low for n in rungs}, rule=base["name"]))
    if "recommended" in include:
        arms.append(_recommended("recommended", policy))
    for name, answer in extra:
        arms.append(_recommended(name, answer))
    for index in frontier_points:
        arms.append(Arm(f"frontier_{index}", "frontier", _replay(frontier, rungs, index), frontier_point=index))
    return _merge(arms)


def _recommended(name: str, policy: Mapping[str, Any]) -> Arm:
    overrides = {o["layer"]: list(o["gemms"]) for o in policy.get("gemm_overrides") or []}
    return Arm(name, "recommended", _ladder(policy), overrides)


def _merge(arms: list[Arm]) -> list[Arm]:
    kept: dict[tuple[object, ...], Arm] = {}
    for arm in arms:
        first = kept.get(arm.key())
        if first is None:
            kept[arm.key()] = arm
        else:
            kept[arm.key()] = Arm(
                first.name, first.kind, first.precisions, first.bf16_gemms, first.rule, first.frontier_point,
                (*first.also, arm.name),
            )  # fmt: skip
    return list(kept.values())


def experiment_body(
    measured: Sequence[Mapping[str, Any]], *, name: str, run_id: int | None = None, seed: int | None = None,
    setup: Mapping[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """`POST .../experiments` body from `runner.run_arms` results (each arm once; merged names in `setup`), or from
    `replicates.run_replicates` rows: then each arm carries `heldout_losses` beside their mean and the body `seeds`
    (with a single replicate the body is the single-run one)."""
    arms = []
    for row in measured:
        arm: Arm = row["arm"]
        entry = {
            "name": arm.name,
            "kind": arm.kind,
            "steps": row["steps"],
            "heldout_loss": row["heldout_loss"],
            "step_time_s": row["step_time_s"],
            "train_loss": row["train_loss"],
            "precisions": arm.precisions,
        }
        if len(row.get("heldout_losses") or ()) > 1:
            entry["heldout_losses"] = list(row["heldout_losses"])
        if arm.bf16_gemms:
            entry["bf16_gemms"] = arm.bf16_gemms
        if arm.rule is not None:
            entry["rule"] = arm.rule
        if arm.frontier_point is not None:
            entry["frontier_point"] = arm.frontier_point
        arms.append(entry)
    merged = {row["arm"].name: ", ".join(row["arm"].also) for row in measured if row["arm"].also}
    body: dict[str, Any] = {
        "name": name,
        "arms": arms,
        "setup": {**(setup or {}), **{f"same_as.{k}": v for k, v in merged.items()}},
    }
    if run_id is not None:
        body["run_id"] = run_id
    if seed is not None:
        body["seed"] = seed
    seeds = measured[0].get("seeds") if measured else None
    if seeds is not None and len(seeds) > 1:
        body["seeds"] = list(seeds)
    return body
