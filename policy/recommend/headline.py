"""The answer's headline: every layer's recommended precision, the precision mix, the one speedup and one sentence.

Belongs here: the `headline` section of the recommendation JSON, the one record the views read the answer from
(the run page's cards, its layer table's recommended column and its heatmap's row marks, the runs list's mix, the
CLI summary). Must not be here: how a precision is chosen (recommend/ladder.py, skiplist.py) or the cost
(recommend/cost.py).

Rules: a layer's recommended precision is the precision the answer runs it at (`runs_at`, as recommend() computes
it from the ladder and the plan, the way apply_policy's TE backend applies them): its rung, `bf16` for the BF16 set
(skipped or kept because it ran in BF16), the recommended recipe for a layer without a rung (no stats). GEMM
layers only (the cost's layers), in run order. A layer with GEMM overrides keeps its rung; `gemm_overrides` names
those layers. The mix counts layers per precision, cheapest first.
"""

from __future__ import annotations

from typing import Any

from fp8_policy.policy.analysis.layout import LayerStatus, Layout
from fp8_policy.policy.analysis.recipes import RECIPE_LABELS
from fp8_policy.policy.recommend.cost import counted
from fp8_policy.policy.records import PRECISIONS, PolicyDecision
from fp8_policy.policy.render.precision import kept_bf16

_WORDS = {"nvfp4": "NVFP4", "mxfp8": "MXFP8", "block": "FP8 block", "current": "FP8 current", "delayed": "FP8 delayed"}


def precision_by_layer(layout: Layout, runs_at: dict[str, str], outer: str) -> dict[str, str]:
    """GEMM layer -> its recommended precision (module rules), in run order."""
    out = {}
    for lv in layout.levels.values():
        if not counted(lv, runs_at):
            continue
        out[lv.name] = runs_at.get(lv.name, "bf16" if lv.status is LayerStatus.BF16 else outer)
    return out


def headline(
    layout: Layout,
    runs_at: dict[str, str],
    outer: str,
    *,
    to_bf16: tuple[str, ...],
    kept_bf16: list[str],
    overrides: dict[str, tuple[str, ...]],
    lifted: tuple[str, ...],
    cost: dict[str, Any],
) -> dict[str, Any]:
    """The `headline` section (module rules)."""
    layers = precision_by_layer(layout, runs_at, outer)
    mix = {p: n for p in PRECISIONS if (n := sum(1 for v in layers.values() if v == p))}
    speedup = cost.get("gemm_speedup_vs_all_bf16")
    return {
        "recipe": outer,
        "recipe_label": RECIPE_LABELS[outer],
        "precision_mix": mix,
        "precision_by_layer": layers,
        "to_bf16": len(to_bf16),
        "kept_bf16": len(kept_bf16),
        "gemm_overrides": len(overrides),
        "lifted": len(lifted),
        "gemm_speedup_vs_all_bf16": speedup,
        "text": _sentence(outer, mix, len(to_bf16), len(kept_bf16), overrides, len(lifted), speedup),
    }


def _sentence(
    outer: str,
    mix: dict[str, int],
    to_bf16: int,
    kept: int,
    overrides: dict[str, tuple[str, ...]],
    lifted: int,
    speedup: float | None,
) -> str:
    """'NVFP4 recipe: 5 layers NVFP4, 4 MXFP8 (4 lifted from NVFP4); none to BF16. GEMMs 1.72x faster than all-BF16.'"""
    parts = [f"{n} layer{'s' if n != 1 else ''} {_WORDS[p]}" for p, n in mix.items() if p != "bf16"]
    if lifted:
        parts.append(f"{lifted} lifted from NVFP4 to an FP8 rung")
    if overrides:
        parts.append(f"{len(overrides)} with single GEMMs in BF16")
    bf16 = []
    if to_bf16:
        bf16.append(f"{to_bf16} moved to BF16")
    if kept:
        bf16.append(f"{kept} kept in BF16 (ran in BF16)")
    tail = "; ".join(bf16) if bf16 else "no layer moves to BF16"
    text = f"{_WORDS.get(outer, outer)} recipe: {', '.join(parts) or 'no low-precision layer'}; {tail}."
    if speedup is not None:
        text += f" GEMMs {speedup:.2f}x faster than all-BF16."
    return text


def decision_headline(
    layout: Layout, runs_at: dict[str, str], decision: PolicyDecision, lifted: tuple[str, ...], cost: dict[str, Any]
) -> dict[str, Any]:
    """`headline` of a decision as the answer applies it (`runs_at`: recommend/runs_at.py): recommend() and a
    re-solved target (target.py) build it the same way."""
    return headline(
        layout,
        runs_at,
        decision.recipe.name,
        to_bf16=decision.skip_layers,
        kept_bf16=kept_bf16(decision),
        overrides={o.layer: o.gemms for o in decision.gemm_overrides},
        lifted=lifted,
        cost=cost,
    )
