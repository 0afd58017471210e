"""A recommendation that knows the run before this one (issue 12 item 8): when a problem followed a moved BF16
boundary, do not widen the BF16 region again.

Input: the previous run's `Analysis` (same thresholds) and this run's. `policy.compare.moved_problems` finds the
findings that reappeared at the same place relative to a moved BF16 edge. Effects on the recommendation:
* blocks holding a moved problem are never turned into whole BF16 blocks (their GEMM overrides stay overrides:
  `plan_skips(no_promote=...)`), so the BF16 edge does not grow again;
* the finest-grained recipe the GPU runs is preferred when it is finer than the chosen one (a recipe change
  instead of a wider BF16 tail), said in the recipe reason;
* the JSON gains `history` (previous run, moved problems, advice) and the rationale says why: the BF16 blocks
  added between the runs bought nothing, and Hydra's block-wise `fp8_layers` would widen the edge again for an
  override (the te-yaml policy applies it exactly).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fp8_policy.policy.analysis.result import Analysis
from fp8_policy.policy.compare.boundary import Edges, MovedProblem, moved_problems


@dataclass(frozen=True)
class History:
    """The run before this one: its analysis and how to name it (its id) in the text."""

    previous: Analysis
    previous_run: int | str | None = None


@dataclass(frozen=True)
class HistoryEffect:
    moved: list[MovedProblem] = field(default_factory=list)
    previous_run: int | str | None = None
    added_bf16_blocks: dict[str, list[int]] = field(default_factory=dict)  # side -> blocks BF16 only in this run

    @property
    def no_promote(self) -> frozenset[str]:
        """Layers whose blocks must not become whole BF16 blocks."""
        return frozenset(name for m in self.moved for name in m.head_layers)

    def advice(self) -> list[str]:
        out = []
        for m in self.moved:
            out.append(m.sentence()[0].upper() + m.sentence()[1:] + ".")
            added = self.added_bf16_blocks.get(m.side, [])
            if added:
                out.append(
                    f"The {len(added)} block(s) moved to BF16 at the {m.side} since run "
                    f"{self.previous_run} ({', '.join(map(str, added))}) did not fix it: do not widen the BF16 "
                    "edge again; keep the failing GEMMs of the new edge layer in BF16 (GEMM override) or "
                    "change the recipe, and consider returning those blocks to FP8 with the same override on "
                    f"the previous edge layer(s) {', '.join(m.base_layers)}."
                )
        if self.moved:
            out.append(
                "bionemo's fp8_layers can express a GEMM override only by taking its whole block out of FP8 "
                "(a wider BF16 edge again): apply the override with the te-yaml policy as the TE debug-API "
                "config instead."
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "previous_run": self.previous_run,
            "moved_problems": [m.to_dict() for m in self.moved],
            "added_bf16_blocks": self.added_bf16_blocks,
            "advice": self.advice(),
        }


def history_effect(history: History | None, analysis: Analysis) -> HistoryEffect | None:
    if history is None:
        return None
    moved = moved_problems(history.previous, analysis)
    before, after = Edges.of(history.previous.layout), Edges.of(analysis.layout)
    blocks = analysis.layout.blocks
    added: dict[str, list[int]] = {}
    if after.start > before.start:
        added["start"] = blocks[before.start : after.start]
    if after.end > before.end:
        added["end"] = blocks[len(blocks) - after.end : len(blocks) - before.end]
    return HistoryEffect(moved, history.previous_run, added)
