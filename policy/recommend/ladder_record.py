"""The precision ladder's record (`Ladder`: rungs, assumptions, lifted layers) and its JSON / one-line summary.

Belongs here: the record and its views. Must not be here: the rung rules (recommend/ladder.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fp8_policy.policy.records import PRECISIONS, LayerPrecision

FP8_FINEST_FIRST: tuple[str, ...] = ("mxfp8", "block", "current")


@dataclass(frozen=True, slots=True)
class Ladder:
    rungs: tuple[LayerPrecision, ...]
    assumptions: tuple[str, ...]
    # layers failing NVFP4 that left the skip list for their FP8 rung (lift rule; their evidence says so)
    lifted: tuple[str, ...] = ()

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(PRECISIONS, 0)
        for rung in self.rungs:
            out[rung.precision] += 1
        return out

    def to_dict(self, cost: dict[str, Any] | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "layers": {
                r.layer: {"precision": r.precision, "evidence": list(r.evidence), "confidence": r.confidence}
                for r in self.rungs
            },
            "counts": self.counts(),
            "assumptions": list(self.assumptions),
            "lifted": list(self.lifted),
        }
        if cost is not None:
            out["expected_cost"] = cost
        return out

    def summary(self, training: str) -> str:
        """One sentence: what moves where."""
        c = self.counts()
        fp8 = sum(c[p] for p in ("mxfp8", "block", "current", "delayed"))
        if training == "nvfp4":
            lifted = {p: n for p, n in c.items() if p != "nvfp4" and n}
            moves = ", ".join(f"{n} to {p.upper() if p != 'bf16' else 'BF16'}" for p, n in lifted.items())
            return f"Precision ladder (NVFP4 run): {c['nvfp4']} layer(s) stay NVFP4" + (
                f"; lift {moves}." if moves else "; none needs lifting."
            )
        return (
            f"Precision ladder: {c['nvfp4']} layer(s) can go NVFP4, {fp8} stay FP8 "
            f"({', '.join(f'{n} {p}' for p, n in c.items() if n and p in FP8_FINEST_FIRST + ('delayed',)) or 'none'})"
            f", {c['bf16']} BF16."
        )
