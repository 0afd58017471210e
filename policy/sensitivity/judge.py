"""When a layer's loss sensitivity at a format is high or negligible: relative to the run's other layers there.

Rules (per precision, over the layers with all three GEMMs logged at it, at least `MIN_PEERS` of them):
* high: the layer's sensitivity (three GEMMs summed) is at least `HIGH_RATIO` times the median layer's, or not
  finite. Its high GEMMs are those at least `HIGH_RATIO` times their own median; a high layer with none of them
  singled out counts all three.
* negligible: at most `LOW_RATIO` times the median layer's.
* otherwise normal. With fewer peers nothing is judged (the verdict says so).
Relative, not absolute: the values are an estimate whose scale depends on the model and the loss, so a layer is
compared with its peers under the same cast, as the ladder compares NVFP4 underflow with its peers.
Pure: the judgements and their sentences; what the recommendation does with them is in policy/recommend/.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from fp8_policy.policy.records import GEMMS
from fp8_policy.policy.sensitivity.table import UNIT, Sensitivity

HIGH_RATIO = 4.0
LOW_RATIO = 0.25
MIN_PEERS = 4


@dataclass(frozen=True, slots=True)
class SensitivityVerdict:
    level: str  # high | normal | negligible | unjudged
    risk: float
    median: float | None
    high_gemms: tuple[str, ...]
    precision: str

    @property
    def sentence(self) -> str:
        value = f"{self.risk:.4g}" if math.isfinite(self.risk) else "not finite"
        head = f"Loss sensitivity at {self.precision}: {value} {UNIT} (fprop+dgrad+wgrad)"
        if self.median is None:
            return f"{head}; too few layers measured at {self.precision} to compare (< {MIN_PEERS})."
        ratio = f"{self.risk / self.median:.2f}x" if self.median > 0 and math.isfinite(self.risk) else "-"
        peers = f"the median layer's {self.median:.4g} ({ratio})"
        if self.level == "high":
            return f"{head}, high: >= {HIGH_RATIO:g}x {peers}; sensitive GEMMs: {'+'.join(self.high_gemms)}."
        if self.level == "negligible":
            return f"{head}, negligible: <= {LOW_RATIO:g}x {peers}."
        return f"{head}, normal against {peers}."


class SensitivityJudge:
    """Verdicts of one run's sensitivity table (module docstring); cached per precision."""

    def __init__(self, table: Sensitivity) -> None:
        self.table = table

    def __bool__(self) -> bool:
        return bool(self.table)

    @cached_property
    def _medians(self) -> dict[str, tuple[float | None, dict[str, float]]]:
        out: dict[str, tuple[float | None, dict[str, float]]] = {}
        precisions = {p for layer in self.table.layers() for p in self.table.precisions(layer)}
        for precision in precisions:
            layers = [layer for layer in self.table.layers() if self.table.risk(layer, precision) is not None]
            if len(layers) < MIN_PEERS:
                out[precision] = (None, {})
                continue
            risks = [self.table.risk(layer, precision) or 0.0 for layer in layers]
            per_gemm = {
                g: float(np.median([self.table.gemm(layer, precision, g) or 0.0 for layer in layers])) for g in GEMMS
            }
            out[precision] = (float(np.median(risks)), per_gemm)
        return out

    def verdict(self, layer: str, precision: str) -> SensitivityVerdict | None:
        """None when the layer has no (complete) sensitivity at `precision` or `precision` is bf16."""
        risk = self.table.risk(layer, precision) if precision != "bf16" else None
        if risk is None:
            return None
        median, per_gemm = self._medians.get(precision, (None, {}))
        if median is None:
            return SensitivityVerdict("unjudged", risk, None, (), precision)
        if not math.isfinite(risk) or risk >= HIGH_RATIO * median and risk > 0:
            high = tuple(
                g
                for g in GEMMS
                if not math.isfinite(value := self.table.gemm(layer, precision, g) or 0.0)
                or (value > 0 and value >= HIGH_RATIO * per_gemm[g])
            )
            return SensitivityVerdict("high", risk, median, high or GEMMS, precision)
        if risk <= LOW_RATIO * median:
            return SensitivityVerdict("negligible", risk, median, (), precision)
        return SensitivityVerdict("normal", risk, median, (), precision)
