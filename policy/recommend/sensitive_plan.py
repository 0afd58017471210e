"""The skip plan's use of loss sensitivity (recommend/skiplist.py): keep an underflowing layer whose sensitivity is
negligible, take a layer whose sensitivity is high out of low precision.

Rules, at the precision the plan judges (the training recipe for the first plan, the recommended one for the final):
* kept: a layer failing on underflows% only (no finding of NaN/inf, rising trend, overflow, unstable scales or
  unassessed stats: ladder_evidence.lift_blockers) whose sensitivity there is negligible stays in low precision;
  the flushed values do not reach the loss (policy/sensitivity/judge.py says what negligible is).
* sensitive: a layer below the critical band whose sensitivity is high gets its sensitive GEMMs in BF16 (a GEMM
  override), or is skipped whole when all three are.
Each adjustment is stated (`SkipPlan.sensitivity_notes`, the override's reason, the ladder's evidence).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fp8_policy.policy.records import GEMMS
from fp8_policy.policy.sensitivity import SensitivityJudge


@dataclass(frozen=True, slots=True)
class Adjustment:
    kind: str  # kept | sensitive
    gemms: tuple[str, ...]  # sensitive: the GEMMs to keep in BF16
    note: str


@dataclass(frozen=True, slots=True)
class SensitivePlan:
    judge: SensitivityJudge
    precision: str
    blockers: Mapping[str, str]

    def adjust(self, layer: str, failing: list[str], raw: list[str]) -> Adjustment | None:
        verdict = self.judge.verdict(layer, self.precision)
        if verdict is None:
            return None
        if failing and not raw and verdict.level == "negligible":
            blocker = self.blockers.get(layer)
            if blocker is not None:
                return None
            return Adjustment(
                "kept",
                (),
                f"{verdict.sentence} Kept at {self.precision} although underflows% fails ({', '.join(failing)}): "
                "the flushed values do not reach the loss.",
            )
        if not failing and not raw and verdict.level == "high":
            gemms = tuple(g for g in GEMMS if g in verdict.high_gemms)
            what = "whole layer" if len(gemms) == len(GEMMS) else "+".join(gemms)
            return Adjustment(
                "sensitive",
                gemms,
                f"{verdict.sentence} Below the underflow band, but kept out of {self.precision} ({what} in BF16) "
                "by its loss sensitivity.",
            )
        return None
