"""The skip plan's use of loss sensitivity (recommend/skiplist.py): keep an underflowing layer whose sensitivity is
negligible, take a layer whose sensitivity is high out of low precision.

Rules, at the precision the plan judges (the training recipe for the first plan, the recommended one for the final):
* kept: a layer failing on underflows% only (no finding of NaN/inf, rising trend, overflow, unstable scales or
  unassessed stats: ladder_evidence.lift_blockers) whose sensitivity there is negligible stays in low precision;
  the flushed values do not reach the loss (policy/sensitivity/judge.py says what negligible is).
* sensitive: a layer below the critical band whose sensitivity is high gets its sensitive GEMMs in BF16 (a GEMM
  override), or is skipped whole when all three are.
* widened: a layer whose underflows% fails for one tensor only (the plan keeps that tensor's GEMMs in BF16) and
  whose sensitivity is high in GEMMs the override leaves in low precision gets those too (the whole layer when all
  three): an underflowing gradient says nothing about the forward GEMM, and the frontier's risk would otherwise
  count a high-sensitivity fprop as left in low precision by the recommendation itself.
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

    def widen(self, layer: str, gemms: tuple[str, ...]) -> Adjustment | None:
        """The `widened` rule (module docstring): the GEMMs to keep in BF16 beyond an underflow override's `gemms`,
        with the note; None when the layer is not high or its high GEMMs are all in the override already."""
        verdict = self.judge.verdict(layer, self.precision)
        if verdict is None or verdict.level != "high":
            return None
        extra = tuple(g for g in GEMMS if g in verdict.high_gemms and g not in gemms)
        if not extra:
            return None
        union = tuple(g for g in GEMMS if g in gemms or g in extra)
        what = "whole layer" if len(union) == len(GEMMS) else "+".join(union)
        return Adjustment(
            "sensitive",
            union,
            f"{verdict.sentence} Underflow already keeps {'+'.join(gemms)} in BF16; {'+'.join(extra)} "
            f"{'joins' if len(extra) == 1 else 'join'} them by its loss sensitivity ({what} in BF16).",
        )
