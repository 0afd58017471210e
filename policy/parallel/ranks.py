"""Where a global rank sits in the job: its tensor, context, data, pipeline and expert coordinates.

Belongs here: `RankCoord` and `rank_coord` / `rank_coords`, which follow megatron/core/parallel_state.py: the
ranks are laid out by `RankGenerator(order=...)`, the first token of the order varying fastest
(`generate_masked_orthogonal_rank_groups`: `global_rank = sum(coord[i] * prod(size[:i]))`). Two generators share
the ranks: the dense one (`tp`, `cp`, `dp`, `pp`; EP 1) and the expert one (expert TP, `ep`, expert DP, `pp`; CP 1),
both with the same order string. Must not be here: which layers a stage holds (stages.py), names (naming.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from fp8_policy.policy.parallel.layout import ParallelLayout


@dataclass(frozen=True, slots=True)
class RankCoord:
    """One rank's coordinates; `ep`, `etp` and `edp` are its place on the expert grid."""

    rank: int
    tp: int
    cp: int
    dp: int
    pp: int
    ep: int = 0
    etp: int = 0
    edp: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"tp": self.tp, "pp": self.pp, "dp": self.dp, "ep": self.ep, "cp": self.cp}


def _decompose(rank: int, order: str, sizes: dict[str, int]) -> dict[str, int]:
    coords: dict[str, int] = {}
    stride = 1
    for token in order.split("-"):
        size = sizes.get(token, 1)
        coords[token] = (rank // stride) % size
        stride *= size
    return coords


def rank_coord(layout: ParallelLayout, rank: int) -> RankCoord:
    """The coordinates of global `rank` (0 <= rank < layout.world_size)."""
    if not 0 <= rank < layout.world_size:
        raise ValueError(f"rank {rank} is outside the job's {layout.world_size} ranks")
    dense = _decompose(rank, layout.order, {"tp": layout.tp, "cp": layout.cp, "dp": layout.dp, "pp": layout.pp})
    expert = _decompose(
        rank, layout.order, {"tp": layout.expert_tp, "ep": layout.ep, "dp": layout.expert_dp, "pp": layout.pp}
    )
    return RankCoord(rank, dense["tp"], dense["cp"], dense["dp"], dense["pp"], expert["ep"], expert["tp"], expert["dp"])


def rank_coords(layout: ParallelLayout, ranks: list[int] | range) -> dict[int, RankCoord]:
    """Coordinates of the given ranks (those outside the layout are left out: the caller reports them)."""
    return {rank: rank_coord(layout, rank) for rank in ranks if 0 <= rank < layout.world_size}
