"""A run's loss-sensitivity statistics as one table: layer -> precision -> GEMM -> micro-nats per step.

Belongs here: picking the sensitivity series out of a `RunData` and summarising each (the mean over the logged
steps at or after the analysis' warm-up cut, all steps when none is; then the mean over ranks: each rank's value
estimates the loss of its own micro-batches). Must not be here: judgements (`judge`), decisions.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from fp8_policy.policy.analysis.recipes import PREFIX_RECIPE
from fp8_policy.policy.records import GEMM_OUTPUTS, GEMMS, SENSITIVITY_STAT, RunData

GEMM_OF_TENSOR = {tensor: gemm for gemm, tensor in GEMM_OUTPUTS.items()}
UNIT = "micro-nats per step"


@dataclass(frozen=True, slots=True)
class Sensitivity:
    """`values[layer][precision][gemm]` in micro-nats per step (NaN/inf kept: a cast that produced them)."""

    values: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.values)

    def gemm(self, layer: str, precision: str, gemm: str) -> float | None:
        return self.values.get(layer, {}).get(precision, {}).get(gemm)

    def risk(self, layer: str, precision: str) -> float | None:
        """The layer's sensitivity at `precision` summed over its three GEMMs; None unless all three were logged;
        inf when any is not finite. BF16 is 0 (nothing is cast)."""
        if precision == "bf16":
            return 0.0
        gemms = self.values.get(layer, {}).get(precision, {})
        if any(g not in gemms for g in GEMMS):
            return None
        total = sum(gemms[g] for g in GEMMS)
        return total if math.isfinite(total) else math.inf

    def precisions(self, layer: str) -> list[str]:
        return [p for p in self.values.get(layer, {}) if self.risk(layer, p) is not None]

    def layers(self) -> list[str]:
        return list(self.values)


def read_sensitivity(run: RunData, warmup_cut: float | None = None) -> Sensitivity:
    """The run's sensitivity series (records.SENSITIVITY_STAT on a GEMM output with a recipe prefix), summarised."""
    per_rank: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for s in run.series:
        m = s.metric
        if m.stat != SENSITIVITY_STAT or m.recipe not in PREFIX_RECIPE or m.tensor not in GEMM_OF_TENSOR:
            continue
        if s.values.size == 0:
            continue
        kept = s.values[s.iterations >= warmup_cut] if warmup_cut is not None else s.values
        values = kept if kept.size else s.values
        mean = float(np.mean(values)) if np.all(np.isfinite(values)) else math.inf
        per_rank[(m.layer, PREFIX_RECIPE[m.recipe], GEMM_OF_TENSOR[m.tensor])].append(mean)
    table: dict[str, dict[str, dict[str, float]]] = {}
    for (layer, precision, gemm), means in per_rank.items():
        table.setdefault(layer, {}).setdefault(precision, {})[gemm] = float(np.mean(means))
    return Sensitivity(table)
