"""How loss sensitivity adjusts one rung's verdict for one layer (recommend/ladder.py).

Rules, with the layer's sensitivity verdict at that rung's precision (policy/sensitivity/judge.py):
* no underflow evidence for the rung: sensitivity decides: it fails when high, else fits (confidence x0.8);
* the rung fits by underflow but sensitivity is high: it fails (the loss feels the cast even where few values
  flush);
* the rung fails by underflow, the layer fails for underflow only (no `lift_blockers` reason) and sensitivity is
  negligible: it fits (x0.8; the flushed values do not reach the loss);
* otherwise the verdict stands. The sensitivity sentence is added to the evidence in every case.
"""

from __future__ import annotations

from fp8_policy.policy.recommend.ladder_evidence import Verdict
from fp8_policy.policy.records import GEMMS
from fp8_policy.policy.sensitivity import SensitivityJudge

SENSITIVITY_FACTOR = 0.8


def with_sensitivity(
    verdict: Verdict, judge: SensitivityJudge | None, layer: str, precision: str, blocker: str | None
) -> Verdict:
    found = judge.verdict(layer, precision) if judge else None
    if found is None:
        return verdict
    said = found.sentence
    if verdict.fit is None:
        if found.level == "high":
            return Verdict(False, f"{precision} fails by loss sensitivity (no underflow stats for it): {said}", 3)
        return Verdict(
            True,
            f"{precision} fits by loss sensitivity (no underflow stats for it): {said}",
            len(GEMMS),
            SENSITIVITY_FACTOR,
        )
    if verdict.fit and found.level == "high":
        return Verdict(False, f"{verdict.sentence} But it fails by loss sensitivity: {said}", verdict.tensors)
    if verdict.fit is False and found.level == "negligible" and blocker is None:
        return Verdict(
            True,
            f"{verdict.sentence} Kept at {precision} by loss sensitivity (the flushed values do not reach the loss): "
            f"{said}",
            verdict.tensors,
            verdict.factor * SENSITIVITY_FACTOR,
        )
    return Verdict(verdict.fit, f"{verdict.sentence} {said}", verdict.tensors, verdict.factor)
