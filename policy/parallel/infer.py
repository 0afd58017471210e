"""A layout told by the logs alone, when the metadata states none.

Belongs here: `infer_layout`, which reads what the ranks' logged block numbers and digests prove, and says what it
assumed. Must not be here: the metadata's layout (layout.py), renaming (naming.py).

What the logs can prove:
* ranks that log disjoint sets of blocks hold different pipeline stages whose names are already global (Megatron
  through TE's debug API numbers blocks by their global `layer_number`): the stages are ordered by their blocks;
  how the ranks of one stage divide into tensor and data parallelism is not told;
* ranks that log the same blocks with identical statistics are replicas;
* ranks that log the same blocks with different statistics may be pipeline stages named locally (every stage from
  0), tensor-parallel shards, or data-parallel ranks logging unreduced statistics: the logs cannot say which.
"""

from __future__ import annotations

from collections.abc import Mapping

from fp8_policy.policy.parallel.info import INFERRED, UNKNOWN, ParallelInfo
from fp8_policy.policy.parallel.layout import ParallelLayout
from fp8_policy.policy.parallel.naming import GLOBAL, LAYER_NUMBER

_ASK = (
    "upload with the job's layout in the metadata (tensor_model_parallel_size, pipeline_model_parallel_size, "
    "num_layers, ...) or record it with fp8_policy.record_parallel_layout() to name layers globally"
)


def infer_layout(blocks: Mapping[int, frozenset[int]], digests: Mapping[int, bytes]) -> ParallelInfo:
    """From each rank's logged block numbers and whole-rank digest, the layout the logs prove (or why not)."""
    ranks = sorted(blocks)
    if len(ranks) <= 1:
        note = "one rank's statistics: assumed to hold the whole model (no layout was given)"
        return ParallelInfo(INFERRED, ParallelLayout(), GLOBAL, {r: {"pp": 0} for r in ranks}, notes=[note])
    groups: dict[frozenset[int], list[int]] = {}
    for rank in ranks:
        groups.setdefault(blocks[rank], []).append(rank)
    sets = [s for s in groups if s]
    if len(sets) > 1 and sum(len(s) for s in sets) == len(frozenset().union(*sets)):
        return _stages(groups, sets)
    if len(groups) == 1 and len({digests[r] for r in ranks if r in digests}) == 1:
        note = f"all {len(ranks)} ranks logged identical statistics: assumed data-parallel replicas of one model"
        layout = ParallelLayout(dp=len(ranks))
        return ParallelInfo(
            INFERRED, layout, GLOBAL, {r: {"pp": 0, "dp": i} for i, r in enumerate(ranks)}, notes=[note]
        )
    return ParallelInfo(
        UNKNOWN,
        notes=[
            f"{len(ranks)} ranks log the same layer names with different statistics: pipeline stages named "
            "locally (every stage numbering its blocks from 0), tensor-parallel shards or unreduced data-parallel "
            f"ranks all look like this, so a layer's name may stand for a different block on each rank; {_ASK}"
        ],
    )


def _stages(groups: dict[frozenset[int], list[int]], sets: list[frozenset[int]]) -> ParallelInfo:
    ordered = sorted(sets, key=min)
    stage_of = {rank: pp for pp, s in enumerate(ordered) for rank in groups[s]}
    unplaced = [rank for s, members in groups.items() if not s for rank in members]
    sizes = {len(groups[s]) for s in ordered}
    first = min(ordered[0])
    naming = LAYER_NUMBER if first == 1 else GLOBAL
    per_stage = sizes.pop() if len(sizes) == 1 else None
    spans = ", ".join(f"{min(s)}-{max(s)}" for s in ordered)
    notes = [
        f"{len(ordered)} groups of ranks log disjoint blocks ({spans}): inferred pipeline stages whose blocks are numbered globally"
    ]
    if per_stage is None:
        notes.append("the stages have different numbers of ranks: the ranks of a stage are not told apart")
    elif per_stage > 1:
        notes.append(f"{per_stage} ranks per stage: not told apart into tensor and data parallelism")
    if unplaced:
        notes.append(f"rank(s) {', '.join(map(str, unplaced))} logged no block: not placed on a stage")
    layout = ParallelLayout(pp=len(ordered), dp=per_stage or 1, num_layers=max(ordered[-1]) - first + 1)
    coords = {rank: {"pp": pp} for rank, pp in stage_of.items()}
    return ParallelInfo(INFERRED, layout, naming, coords, notes=notes)
