"""The speed/risk frontier: every per-layer precision mix worth considering, from all-BF16 to all-cheapest, with the
rule-of-thumb recipes and the recommendation on the same two axes.

Axes:
* speedup: GEMM-time speedup over all-BF16 GEMMs from the project's one cost model (recommend/cost.py: the layer
  FLOPs of `gemm_flops`, the per-GPU speedups of `speedup`; GEMM time = sum(share / speedup)), the
  figure the ladder reports as `gemm_speedup_vs_all_bf16`.
* predicted_risk: the sum, over every layer and GEMM (fprop, dgrad, wgrad) run in low precision, of its loss
  sensitivity at the precision it runs in (policy/sensitivity/: the estimated loss increase per training step),
  in nats per step (the statistics are logged in micro-nats); a GEMM in BF16 adds 0. An estimate for ranking
  mixes against each other, not a forecast of the final loss gap.
Solve (multiple-choice knapsack, as NVIDIA Model Optimizer's `auto_quantize` solves under an effective-bits
budget, here over GEMM time): each layer's candidates are the rungs the GPU runs (the ladder's: nvfp4, then the FP8
rungs, then bf16) whose sensitivity is logged and finite; the lower convex hull of each layer's (time, risk)
candidates gives its useful moves; from all-cheapest, moves are applied in order of risk removed per unit of time
added, until all-BF16. Each point is one move; `points` runs from all-BF16 to all-cheapest. Layers that ran in
BF16 stay BF16 (every output keeps them); layers without sensitivity stay at their recommended rung, listed.
Rules (`RULES`), each with every other layer at the run's own low precision (`low_precision`: the recipe it trained
with when the GPU runs it, else the recommended one): `last_15pct` (torchtitan's
NVFP4 recipe: the last ceil(15 %) of blocks and the head in BF16), `last_n_nvidia` (NVIDIA's Llama-3-8B NVFP4
recipe, the last 4 of 32 blocks, scaled: max(1, n / 8 rounded half up), and the head), `first_last` (Megatron's
--first-last-layers-bf16: one block at each end; Megatron runs the output layer in BF16 anyway), `all_low`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fp8_policy.policy.analysis.layout import LayerLevels, LayerStatus, Layout
from fp8_policy.policy.analysis.recipes import supported
from fp8_policy.policy.recommend.cost import _weights, speedup
from fp8_policy.policy.recommend.options import ModelDims
from fp8_policy.policy.records import GEMMS, GemmOverride, LayerGroup
from fp8_policy.policy.sensitivity import Sensitivity

RISK_UNIT = "nats per step"
RISK_DEFINITION = (
    "Sum over every layer and GEMM (fprop, dgrad, wgrad) run in low precision of its loss sensitivity at that "
    "precision (estimated loss increase per training step: a diagonal-Fisher Taylor estimate of the fprop output "
    "error, gradient errors counted as output errors of the same relative size), in nats per step; BF16 adds 0. "
    "For ranking mixes, not a forecast of the final loss gap."
)
ORDER = ("nvfp4", "mxfp8", "block", "current", "delayed")
RULES = ("last_15pct", "last_n_nvidia", "first_last", "all_low")
RULE_TEXT = {
    "last_15pct": "torchtitan llama3_8b_nvfp4_mixed: the last ceil(15%) of blocks and the LM head in BF16",
    "last_n_nvidia": "NVIDIA's Llama-3-8B NVFP4 recipe: the last 4 of 32 blocks in BF16, scaled to the depth",
    "first_last": "Megatron --first-last-layers-bf16: the first and the last block in BF16 (and its BF16 head)",
    "all_low": "every layer at the run's own low precision",
}


@dataclass(frozen=True, slots=True)
class Move:
    layer: str
    before: str  # toward all-cheapest: the more precise rung
    after: str


@dataclass(frozen=True, slots=True)
class Point:
    speedup: float
    risk: float  # nats per step
    moves: tuple[Move, ...]  # from the previous point (toward cheaper)


@dataclass(frozen=True, slots=True)
class Baseline:
    name: str
    speedup: float
    risk: float | None  # None: a low-precision layer without sensitivity at its rung
    bf16_layers: tuple[str, ...]


@dataclass(frozen=True)
class Frontier:
    start: dict[str, str]  # the all-BF16 point's assignment (fixed layers at their rung)
    points: tuple[Point, ...]  # all-BF16 first
    baselines: tuple[Baseline, ...]
    recommended: tuple[float, float | None]  # the recommendation's (speedup, risk)
    low_precision: str
    unmeasured: tuple[str, ...]
    reason: str = ""  # why there are no points (no sensitivity)
    gemm_time: Callable[[str, str], float] = field(default=lambda layer, p: 0.0, repr=False)
    gemm_risk: Callable[[str, str, str], float | None] = field(default=lambda layer, p, g: None, repr=False)

    def evaluate(
        self, assignment: Mapping[str, str], bf16_gemms: Mapping[str, Iterable[str]] | None = None
    ) -> tuple[float, float | None]:
        """(speedup, risk) of any per-layer assignment of the frontier's layers (missing ones: their all-BF16 point
        rung), GEMMs in `bf16_gemms` (layer -> fprop/dgrad/wgrad) counted in BF16; risk None when a low-precision
        GEMM has no sensitivity at its precision."""
        full = {**self.start, **{k: v for k, v in assignment.items() if k in self.start}}
        kept = {layer: set(gemms) for layer, gemms in (bf16_gemms or {}).items()}
        time, risk = 0.0, 0.0
        unknown = False
        for layer, precision in full.items():
            for gemm in GEMMS:
                low = precision != "bf16" and gemm not in kept.get(layer, ())
                time += self.gemm_time(layer, precision if low else "bf16")
                value = self.gemm_risk(layer, precision, gemm) if low else 0.0
                unknown = unknown or value is None
                risk += value or 0.0
        return 1.0 / time if time > 0 else 1.0, None if unknown else risk

    def assignment(self, index: int) -> dict[str, str]:
        out = dict(self.start)
        for point in self.points[1 : index + 1]:
            for move in point.moves:
                out[move.layer] = move.after
        return out

    def to_dict(self, chosen: dict[str, Any] | None = None) -> dict[str, Any]:
        speedup, risk = self.recommended
        return {
            "available": bool(self.points),
            **({"reason": self.reason} if self.reason else {}),
            "risk_unit": RISK_UNIT,
            "predicted_risk_definition": RISK_DEFINITION,
            "low_precision": self.low_precision,
            "points": [
                {
                    "speedup": round(p.speedup, 4),
                    "predicted_risk": _risk(p.risk),
                    "layers_changed": [{"layer": m.layer, "from": m.before, "to": m.after} for m in p.moves],
                }
                for p in self.points
            ],
            "chosen": chosen
            or {"source": "recommendation", "speedup": round(speedup, 4), "predicted_risk": _risk(risk)},
            "baselines": [
                {
                    "name": b.name,
                    "rule": RULE_TEXT[b.name],
                    "speedup": round(b.speedup, 4),
                    "predicted_risk": _risk(b.risk),
                    "bf16_layers": list(b.bf16_layers),
                }
                for b in self.baselines
            ],
            "unmeasured_layers": list(self.unmeasured),
        }


def _risk(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.6g}")


def candidates(outer: str, capability: float) -> list[str]:
    """The ladder's rungs on this GPU, cheapest-format first (delayed only as the recommended recipe)."""
    rungs = [p for p in ORDER if p != "delayed" or outer == "delayed"]
    return [p for p in rungs if supported(p, capability)] + ["bf16"]


def build_frontier(
    layout: Layout,
    rungs: Mapping[str, str],
    overrides: tuple[GemmOverride, ...],
    recommended_speedup: float,
    table: Sensitivity,
    outer: str,
    capability: float,
    dims: ModelDims,
    training: str | None = None,
) -> Frontier:
    """The frontier for a recommendation running each layer of `rungs` (every layer its cost counts) at its value
    (module docstring); the rules run their other layers
    at `training` (the recipe the run trained with: the user's low precision) when the GPU runs it, else `outer`."""
    layers = [lv for lv in layout.levels.values() if lv.name in rungs]  # the cost's layers (runs_at.counted_rungs)
    weights, _method, _missing = _weights(layers, dims)
    total = 3.0 * sum(weights.values()) or 1.0

    def gemm_time(layer: str, precision: str) -> float:
        return weights[layer] / total / speedup(precision, capability)[0]

    def time_of(assignment: Mapping[str, str]) -> float:
        return sum(3.0 * gemm_time(n, p) for n, p in assignment.items())

    def gemm_risk(layer: str, precision: str, gemm: str) -> float | None:
        value = table.gemm(layer, precision, gemm) if precision != "bf16" else 0.0
        return None if value is None else value / 1e6

    def risk_of(layer: str, precision: str) -> float | None:
        value = table.risk(layer, precision)
        return None if value is None else value / 1e6

    options = candidates(outer, capability)
    low = training if training in options and training != "bf16" else outer
    hulls: dict[str, list[tuple[float, float, str]]] = {}
    fixed: dict[str, str] = {}
    for lv in layers:
        measured = [
            (3.0 * weights[lv.name] / total / speedup(p, capability)[0], r, p)
            for p in options
            if (r := risk_of(lv.name, p)) is not None and math.isfinite(r)
        ]
        if lv.status is LayerStatus.BF16 or len(measured) < 2:
            fixed[lv.name] = "bf16" if lv.status is LayerStatus.BF16 else rungs[lv.name]
        else:
            hulls[lv.name] = _lower_hull(measured)
    unmeasured = tuple(n for n, p in fixed.items() if p != "bf16" and risk_of(n, p) is None)
    recommended = (recommended_speedup, _recommended_risk(rungs, overrides, table, layers))
    baselines = tuple(_baseline(name, layout, layers, low, time_of, risk_of) for name in RULES)
    if not hulls:
        reason = "no loss-sensitivity statistics for these layers" if not table else "too few measured rungs per layer"
        start = {lv.name: fixed.get(lv.name, "bf16") for lv in layers}
        return Frontier(start, (), baselines, recommended, low, unmeasured, reason, gemm_time, gemm_risk)
    state = {**fixed, **{name: hull[0][2] for name, hull in hulls.items()}}
    order = {name: i for i, name in enumerate(hulls)}
    segments = sorted(
        (
            ((a[1] - b[1]) / (b[0] - a[0]) if b[0] > a[0] else math.inf, order[name], a[2], b[2], name)
            for name, hull in hulls.items()
            for a, b in zip(hull, hull[1:], strict=False)
        ),
        key=lambda s: (-s[0], s[1]),
    )
    metrics = [(1.0 / time_of(state), _sum_risk(state, risk_of))]  # metrics[k]: after k moves from all-cheapest
    lifts: list[Move] = []  # lifts[k] takes state k to k + 1; read backwards it is a move toward cheaper
    for _efficiency, _i, cheaper, dearer, name in segments:
        state[name] = dearer
        lifts.append(Move(name, dearer, cheaper))
        metrics.append((1.0 / time_of(state), _sum_risk(state, risk_of)))
    last = len(lifts)
    points = tuple(
        Point(*metrics[last - j], (lifts[last - j],) if j else ()) for j in range(last + 1)
    )  # point j is state last - j; from point j - 1 it undoes lift last - j
    return Frontier(dict(state), points, baselines, recommended, low, unmeasured, "", gemm_time, gemm_risk)


def _lower_hull(options: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """The lower convex hull of (time, risk) from the cheapest candidate to the slowest, risk falling: a candidate
    no faster than one with less risk is never worth taking."""
    useful: list[tuple[float, float, str]] = []
    for option in sorted(options, key=lambda o: (o[0], o[1])):
        if useful and option[1] >= useful[-1][1]:
            continue
        useful.append(option)
    hull: list[tuple[float, float, str]] = []
    for option in useful:
        while len(hull) >= 2 and _cross(hull[-2], hull[-1], option) <= 0:
            hull.pop()
        hull.append(option)
    slowest = max(options, key=lambda o: (o[0], -o[1]))
    if hull[-1][2] != slowest[2]:  # a rung as safe as BF16 (risk 0): BF16 still ends the hull, moved to last
        hull.append(slowest)
    return hull


def _cross(o: tuple[float, float, str], a: tuple[float, float, str], b: tuple[float, float, str]) -> float:
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def _sum_risk(state: Mapping[str, str], risk_of: Callable[[str, str], float | None]) -> float:
    """Risk of an assignment; a fixed layer without sensitivity at its rung adds nothing (`unmeasured_layers`)."""
    return sum(risk_of(n, p) or 0.0 for n, p in state.items())


def _recommended_risk(
    rungs: Mapping[str, str], overrides: tuple[GemmOverride, ...], table: Sensitivity, layers: list[LayerLevels]
) -> float | None:
    """The recommendation's risk: GEMM by GEMM (a GEMM override adds 0); None when a low rung is unmeasured."""
    if not table:
        return None
    kept = {o.layer: set(o.gemms) for o in overrides}
    total = 0.0
    for lv in layers:
        precision = rungs[lv.name]
        if precision == "bf16":
            continue
        for gemm in GEMMS:
            if gemm in kept.get(lv.name, ()):
                continue
            value = table.gemm(lv.name, precision, gemm)
            if value is None:
                return None
            total += value / 1e6
    return total


def rule_bf16_layers(name: str, layout: Layout, layers: list[LayerLevels]) -> list[str]:
    """Which GEMM layers a rule keeps in BF16 (module docstring); layers that ran in BF16 are added by the caller."""
    blocks = layout.blocks
    heads = [lv.name for lv in layers if lv.info.structure.group is LayerGroup.HEAD]
    n = len(blocks)
    if name == "all_low":
        return []
    if name == "last_15pct":
        chosen = set(blocks[n - math.ceil(0.15 * n) :]) if n else set()
    elif name == "last_n_nvidia":
        chosen = set(blocks[n - max(1, math.floor(4 * n / 32 + 0.5)) :]) if n else set()
    elif name == "first_last":
        chosen = {blocks[0], blocks[-1]} if n else set()
    else:
        raise ValueError(f"unknown rule {name!r}")
    return [lv.name for lv in layers if lv.block in chosen] + heads


def _baseline(
    name: str,
    layout: Layout,
    layers: list[LayerLevels],
    outer: str,
    time_of: Callable[[Mapping[str, str]], float],
    risk_of: Callable[[str, str], float | None],
) -> Baseline:
    bf16 = set(rule_bf16_layers(name, layout, layers)) | {lv.name for lv in layers if lv.status is LayerStatus.BF16}
    assignment = {lv.name: "bf16" if lv.name in bf16 else outer for lv in layers}
    risks = [risk_of(n, p) for n, p in assignment.items()]
    risk = None if any(r is None for r in risks) else sum(r or 0.0 for r in risks)
    return Baseline(name, 1.0 / time_of(assignment), risk, tuple(lv.name for lv in layers if lv.name in bf16))
