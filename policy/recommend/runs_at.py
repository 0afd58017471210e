"""The precision each layer of an answer runs at, as apply_policy's TE backend and policy/render/precision.py apply
the ladder: the one reading the cost (recommend/cost.py), the headline and a re-solved target share."""

from __future__ import annotations

from collections.abc import Iterable

from fp8_policy.policy.analysis.layout import LayerStatus, Layout
from fp8_policy.policy.recommend.cost import counted
from fp8_policy.policy.records import LayerPrecision
from fp8_policy.policy.render.precision import effective_rung


def applied_rungs(rungs: Iterable[LayerPrecision], bf16_layers: Iterable[str], outer: str) -> dict[str, str]:
    """Layer -> the precision the answer runs it at: BF16 for the plan's BF16 set (`bf16_layers`), a ladder `bf16`
    rung outside it at `outer` (not applied: the plan decided otherwise), any other rung as `effective_rung` runs it
    under `outer`."""
    kept = set(bf16_layers)
    out = dict.fromkeys(kept, "bf16")
    for rung in rungs:
        if rung.layer in kept:
            continue
        out[rung.layer] = outer if rung.precision == "bf16" else effective_rung(rung.precision, outer)
    return out


def counted_rungs(layout: Layout, runs_at: dict[str, str], outer: str) -> dict[str, str]:
    """Every layer the answer's cost counts (`cost.counted`) at the precision it runs at, so the frontier's time
    model is the cost's: a layer without a rung at `outer`, one that ran in BF16 in BF16."""
    return {
        lv.name: runs_at.get(lv.name, "bf16" if lv.status is LayerStatus.BF16 else outer)
        for lv in layout.levels.values()
        if counted(lv, runs_at)
    }
