"""The ladder's evidence readers (recommend/ladder.py): NVFP4 weight levels under NVFP4 training, the block-16
dynamic range, and which layers fail for more than underflow (the lift rule's blockers); `Verdict`, one rung's
verdict for one layer.

Belongs here: reading series and findings into per-layer numbers and reasons. Must not be here: rung rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fp8_policy.policy.analysis.findings import Pattern
from fp8_policy.policy.analysis.layout import LayerStatus
from fp8_policy.policy.analysis.result import Analysis
from fp8_policy.policy.analysis.signals import SeriesSummary, summarize
from fp8_policy.policy.records import QUANTIZED_TENSORS, LayerPrecision, MetricName, RunData

_DR = "max_blockwise_dynamic_range_block_size_16_dims_"
# findings whose layers fail for more than underflow: MXFP8's wider per-block range does not answer them
_NOT_UNDERFLOW: dict[Pattern, str] = {
    Pattern.NON_FINITE: "it logged NaN/inf",
    Pattern.RISING_TREND: "its underflow is rising",
    Pattern.OVERFLOW: "it overflows",
    Pattern.SCALE_INSTABILITY: "its scales are unstable",
    Pattern.UNASSESSED: "part of its stats could not be assessed",
}


@dataclass(frozen=True, slots=True)
class Verdict:
    """One rung for one layer: fit (True / False / None = no evidence), why, and the tensors it rests on."""

    fit: bool | None
    sentence: str
    tensors: int = 0
    factor: float = 1.0


def lift_blockers(analysis: Analysis) -> dict[str, str]:
    """layer -> why a failure of it is not underflow only (the findings in `_NOT_UNDERFLOW`), first finding wins."""
    out: dict[str, str] = {}
    for pattern, why in _NOT_UNDERFLOW.items():
        for finding in analysis.by_pattern(pattern):
            for name in (*finding.layers, *(ev.layer for ev in finding.evidence)):
                out.setdefault(name, why)
    return out


def training_nvfp4_weights(run: RunData, analysis: Analysis) -> dict[str, float]:
    """Worst-rank level of each layer's weight nvfp4_underflows% under NVFP4 training (left out of the analysis
    levels, formats.py), summarised with the analysis' warm-up cut and window rules."""
    out: dict[str, float] = {}
    th, start = analysis.requested_thresholds, analysis.signals.warmup_cut
    for s in run.series:
        m = s.metric
        if m.recipe != "nvfp4" or m.tensor != "weight" or m.stat != "underflows%" or s.iterations.size == 0:
            continue
        summary = summarize(s, MetricName(m.layer, m.tensor, m.stat), start, th)
        if summary is not None and summary.level == summary.level:
            out[m.layer] = max(out.get(m.layer, -math.inf), summary.level)
    return out


def dynamic_ranges(run: RunData, analysis: Analysis) -> dict[str, dict[str, float]]:
    """layer -> tensor -> the largest logged max_blockwise_dynamic_range at block size 16 (binades)."""
    out: dict[str, dict[str, float]] = {}
    start, th = analysis.signals.warmup_cut, analysis.requested_thresholds
    for s in run.series:
        m = s.metric
        if m.tensor not in QUANTIZED_TENSORS or not m.stat.startswith(_DR) or s.iterations.size == 0:
            continue
        summary: SeriesSummary | None = summarize(s, m, start, th)
        if summary is None:
            continue
        layer = out.setdefault(m.layer, {})
        layer[m.tensor] = max(layer.get(m.tensor, -math.inf), summary.max)
    return out


def unobserved_own_rungs(analysis: Analysis, outer: str) -> list[LayerPrecision]:
    """Layers without statistics that trained in another recipe than `outer` (a mixed-format run whose metadata
    `layer_recipes` or Megatron precision config names them): they keep the recipe they trained in, never a cheaper
    one without evidence."""
    own = analysis.training.layer_recipes
    out = []
    for lv in analysis.layout.levels.values():
        recipe = own.get(lv.name)
        if lv.status is LayerStatus.UNOBSERVED and recipe is not None and recipe != outer:
            out.append(
                LayerPrecision(
                    lv.name,
                    recipe,
                    (
                        f"Kept at {recipe}, the recipe it trained in (stated in the run metadata): no statistics logged.",
                    ),
                    0.5,
                )
            )
    return out
