"""Did a problem move with the BF16 boundary instead of being fixed? (issue 12 item 8)

A published study (OG2-7B, Llama-3 architecture, FP8 block scaling, bionemo-framework fp8_analysis "FL2 vs FL4")
kept the first/last 2 blocks in BF16 and saw fc2 activation underflow rise to ~18 % in the last FP8 block before
the BF16 tail (block 30); with the first/last 4 blocks in BF16 the same thing appeared at the new last FP8 block
(block 28), and the loss was worse. Widening the BF16 tail moved the problem; it did not fix it.

Rule: the BF16 edges of a run are the contiguous runs of BF16 blocks from its first and from its last block
(`Layout.block_status`). A finding of the base run that is gone in the head run "followed the boundary" when the
head run has a new finding of the same pattern family whose body layers sit at the same positions relative to an
edge that moved (same sublayers, same distance from the first/last FP8 block: 0 = the block next to the BF16
edge), at different absolute blocks. Patterns compared: boundary, late_layers, early_layers, single_tensor
(the ways a degrading layer next to a BF16 region is reported).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fp8_policy.policy.analysis.findings import Finding, Pattern
from fp8_policy.policy.analysis.layout import Layout
from fp8_policy.policy.analysis.result import Analysis

EDGE_PATTERNS = frozenset({Pattern.BOUNDARY, Pattern.LATE_LAYERS, Pattern.EARLY_LAYERS, Pattern.SINGLE_TENSOR})


@dataclass(frozen=True, slots=True)
class Edges:
    """How many blocks at the start and at the end of the body ran wholly in BF16."""

    start: int
    end: int
    blocks: int

    @classmethod
    def of(cls, layout: Layout) -> Edges:
        bf16 = [layout.block_status.get(b) == "bf16" for b in layout.blocks]
        start = next((i for i, is_bf16 in enumerate(bf16) if not is_bf16), len(bf16))
        end = next((i for i, is_bf16 in enumerate(reversed(bf16)) if not is_bf16), len(bf16))
        return cls(start, 0 if start == len(bf16) else end, len(bf16))


@dataclass(frozen=True, slots=True)
class MovedProblem:
    """A finding that reappeared at the same place relative to a BF16 edge that moved."""

    pattern: Pattern
    side: str  # "start" | "end"
    distance: int  # 0: the FP8 block right next to the BF16 edge
    base_layers: tuple[str, ...]
    head_layers: tuple[str, ...]
    base_blocks: tuple[int, ...]  # logged block numbers
    head_blocks: tuple[int, ...]
    base_edge: int  # BF16 blocks on that side in the base run
    head_edge: int
    base_level: float | None  # worst evidence level, %
    head_level: float | None
    tensor: str | None

    def sentence(self) -> str:
        where = "last" if self.side == "end" else "first"
        nth = "" if self.distance == 0 else f"{self.distance} block(s) from the "
        levels = (
            f" ({self.tensor} underflows% {self.base_level:.2f}% -> {self.head_level:.2f}%)"
            if self.base_level is not None and self.head_level is not None
            else ""
        )
        return (
            f"the problem followed the boundary: {self.pattern.label} at block(s) {_blocks(self.base_blocks)} "
            f"({nth}{where} FP8 block next to {self.base_edge} BF16 block(s) at the {self.side}) is gone, and the "
            f"same appears at block(s) {_blocks(self.head_blocks)}, the new {nth}{where} FP8 block next to "
            f"{self.head_edge} BF16 block(s){levels}: moving the BF16 edge moved the problem instead of fixing it"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "pattern": self.pattern.value,
            "label": self.pattern.label,
            "side": self.side,
            "distance_from_edge": self.distance,
            "base_layers": list(self.base_layers),
            "head_layers": list(self.head_layers),
            "base_blocks": list(self.base_blocks),
            "head_blocks": list(self.head_blocks),
            "base_bf16_edge_blocks": self.base_edge,
            "head_bf16_edge_blocks": self.head_edge,
            "tensor": self.tensor,
            "base_level": _round(self.base_level),
            "head_level": _round(self.head_level),
            "summary": self.sentence(),
        }


def moved_problems(base: Analysis, head: Analysis) -> list[MovedProblem]:
    """The findings of `base` that reappeared in `head` at the same place relative to a moved BF16 edge."""
    e_base, e_head = Edges.of(base.layout), Edges.of(head.layout)
    sides = [side for side in ("start", "end") if getattr(e_base, side) != getattr(e_head, side)]
    if not sides:
        return []
    head_keys = {(f.pattern, frozenset(f.layers)) for f in head.findings}
    base_keys = {(f.pattern, frozenset(f.layers)) for f in base.findings}
    gone = [
        f for f in base.findings if f.pattern in EDGE_PATTERNS and (f.pattern, frozenset(f.layers)) not in head_keys
    ]
    new = [f for f in head.findings if f.pattern in EDGE_PATTERNS and (f.pattern, frozenset(f.layers)) not in base_keys]
    out: list[MovedProblem] = []
    used: set[int] = set()
    for old in gone:
        for side in sides:
            where_old = _positions(old, base.layout, e_base, side)
            if not where_old:
                continue
            match = next(
                (
                    i
                    for i, f in enumerate(new)
                    if i not in used
                    and _family(f) == _family(old)
                    and _positions(f, head.layout, e_head, side) == where_old
                ),
                None,
            )
            if match is None:
                continue
            used.add(match)
            out.append(_moved(old, new[match], side, min(d for d, _ in where_old), base, head, e_base, e_head))
            break
    return out


def _family(finding: Finding) -> str:
    """Boundary / late / early / single-tensor findings of one degrading layer are the same problem."""
    return "edge" if finding.pattern in EDGE_PATTERNS else finding.pattern.value


def _positions(finding: Finding, layout: Layout, edges: Edges, side: str) -> frozenset[tuple[int, str]]:
    """(distance from the FP8 block next to the `side` BF16 edge, sublayer) of the finding's body layers; empty
    when the finding has layers outside the body or the side has no BF16 edge."""
    if getattr(edges, side) == 0:
        return frozenset()
    index = {block: i for i, block in enumerate(layout.blocks)}
    out = set()
    for name in finding.layers:
        level = layout.levels.get(name)
        if level is None or level.block not in index:
            return frozenset()
        position = index[level.block]
        distance = (edges.blocks - edges.end - 1 - position) if side == "end" else position - edges.start
        if distance < 0:
            return frozenset()
        out.add((distance, level.info.structure.sublayer or ""))
    return frozenset(out)


def _moved(
    old: Finding, new: Finding, side: str, distance: int, base: Analysis, head: Analysis, e_base: Edges, e_head: Edges
) -> MovedProblem:
    top_old = max(old.evidence, key=lambda ev: ev.level or 0.0, default=None)
    top_new = max(new.evidence, key=lambda ev: ev.level or 0.0, default=None)
    return MovedProblem(
        new.pattern,
        side,
        distance,
        old.layers,
        new.layers,
        _block_numbers(old, base.layout),
        _block_numbers(new, head.layout),
        getattr(e_base, side),
        getattr(e_head, side),
        top_old.level if top_old else None,
        top_new.level if top_new else None,
        top.tensor if (top := top_new or top_old) else None,
    )


def _block_numbers(finding: Finding, layout: Layout) -> tuple[int, ...]:
    return tuple(sorted({lv.block for n in finding.layers if (lv := layout.levels.get(n)) and lv.block is not None}))


def _blocks(blocks: tuple[int, ...]) -> str:
    return ", ".join(map(str, blocks))


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 4)
