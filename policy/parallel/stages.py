"""Which transformer blocks each pipeline stage (and virtual stage) builds, in global 0-based block numbers.

Belongs here: `stage_blocks(layout, pp_rank, vp_stage)`, `rank_chunks(layout, pp_rank)` and `block_home(layout,
block)` (the inverse: which stage, chunk and ModuleList position holds a global block), following Megatron-LM:
`get_transformer_layer_offset` (megatron/core/transformer/transformer_layer.py) and `get_num_layers_to_build`
(megatron/core/transformer/transformer_block.py): even splits, uneven first/last stages
(`num_layers_in_first/last_pipeline_stage`), interleaved virtual stages, embedding/loss counted in the split
(`account_for_embedding/loss_in_pipeline_split`), and explicit layouts (`PipelineParallelLayerLayout.
get_layer_offset`: every earlier virtual stage of every rank, then the earlier ranks of this virtual stage).
A stage's `TransformerBlock.layers` is a ModuleList indexed from 0; its modules' `layer_number` is
`index + 1 + offset` (global, 1-based).
Must not be here: rank coordinates (ranks.py), names (naming.py).

Where Megatron would assert (blocks that do not divide over the stages), `StageError` says why: the caller names it
in a note and treats the layout as unknown for placement.
"""

from __future__ import annotations

from fp8_policy.policy.parallel.layout import ParallelLayout


class StageError(ValueError):
    """The layout cannot place the blocks (Megatron would refuse it at start-up)."""


def stage_blocks(layout: ParallelLayout, pp_rank: int, vp_stage: int = 0) -> range:
    """The global 0-based blocks built by pipeline rank `pp_rank`, virtual stage `vp_stage`."""
    if not 0 <= pp_rank < layout.pp or not 0 <= vp_stage < layout.virtual_stages:
        raise StageError(f"no pipeline rank {pp_rank} / virtual stage {vp_stage} in {layout.describe()}")
    if layout.num_layers is None and layout.stage_counts is None:
        raise StageError("the number of layers (num_layers) is not known")
    offset = _offset(layout, pp_rank, vp_stage)
    count = _count(layout, pp_rank, vp_stage)
    if count < 0 or offset < 0:
        raise StageError(f"pipeline rank {pp_rank} would build a negative number of layers")
    return range(offset, offset + count)


def rank_chunks(layout: ParallelLayout, pp_rank: int) -> list[range]:
    """The blocks of each virtual stage (model chunk) of pipeline rank `pp_rank`, chunk 0 first."""
    return [stage_blocks(layout, pp_rank, vp) for vp in range(layout.virtual_stages)]


def block_home(layout: ParallelLayout, block: int) -> tuple[int, int, int]:
    """(pp_rank, vp_stage, ModuleList index within that chunk) of global 0-based `block`."""
    for pp_rank in range(layout.pp):
        for vp_stage in range(layout.virtual_stages):
            blocks = stage_blocks(layout, pp_rank, vp_stage)
            if block in blocks:
                return pp_rank, vp_stage, block - blocks.start
    raise StageError(f"block {block} is on no pipeline stage of {layout.describe()}")


def check_stages(layout: ParallelLayout) -> None:
    """Raise StageError unless every block is built exactly once (what Megatron's asserts guarantee)."""
    if layout.pp == 1 and layout.stage_counts is None:
        return
    seen: list[int] = []
    for pp_rank in range(layout.pp):
        for blocks in rank_chunks(layout, pp_rank):
            seen.extend(blocks)
    total = layout.num_layers if layout.num_layers is not None else len(seen)
    if sorted(seen) != list(range(total)):
        raise StageError(f"{layout.describe()} does not place {total} blocks once each (Megatron would refuse it)")


# --- Megatron's rules ------------------------------------------------------------------------------------------


def _count(layout: ParallelLayout, pp_rank: int, vp_stage: int) -> int:
    """get_num_layers_to_build."""
    if layout.stage_counts is not None:
        return layout.stage_counts[pp_rank][vp_stage]
    assert layout.num_layers is not None
    first, last = pp_rank == 0, pp_rank == layout.pp - 1
    if layout.first_stage_layers is not None or layout.last_stage_layers is not None:
        if layout.embedding_in_split or layout.loss_in_split:
            raise StageError("uneven pipeline stages cannot count the embedding or loss in the split")
        left, stages = layout.num_layers, layout.pp
        for given in (layout.first_stage_layers, layout.last_stage_layers):
            if given is not None:
                left, stages = left - given, stages - 1
        if stages > 0 and left % stages:
            raise StageError(f"{left} blocks do not divide over {stages} middle pipeline stage(s)")
        per_rank = left // stages if stages > 0 else 0
        if first and layout.first_stage_layers is not None:
            per_rank = layout.first_stage_layers
        if last and layout.last_stage_layers is not None:
            per_rank = layout.last_stage_layers
    else:
        blocks = layout.num_layers + layout.embedding_in_split + layout.loss_in_split
        if blocks % layout.pp:
            raise StageError(f"{blocks} blocks do not divide over {layout.pp} pipeline stages")
        per_rank = blocks // layout.pp
    vpp = layout.vpp
    if vpp is not None and layout.pp > 1:
        if per_rank % vpp:
            raise StageError(f"{per_rank} blocks of a stage do not divide over {vpp} virtual stages")
        per_rank //= vpp
    if layout.embedding_in_split and first and vp_stage == 0:
        per_rank -= 1
    if layout.loss_in_split and last and vp_stage == layout.virtual_stages - 1:
        per_rank -= 1
    return per_rank


def _offset(layout: ParallelLayout, pp_rank: int, vp_stage: int) -> int:
    """get_transformer_layer_offset."""
    if layout.pp == 1 and layout.stage_counts is None:
        return 0
    if layout.stage_counts is not None:
        counts = layout.stage_counts
        return sum(counts[p][v] for v in range(vp_stage + 1) for p in range(layout.pp if v < vp_stage else pp_rank))
    assert layout.num_layers is not None
    vpp = layout.vpp
    if layout.first_stage_layers is not None or layout.last_stage_layers is not None:
        given = [x for x in (layout.first_stage_layers, layout.last_stage_layers) if x is not None]
        middle_stages = layout.pp - len(given)
        first = layout.first_stage_layers or 0
        last = layout.last_stage_layers or 0
        middle_layers = layout.num_layers - first - last
        middle_rank = pp_rank if layout.first_stage_layers is None else pp_rank - 1
        if vpp is not None:
            first_chunk, last_chunk, middle_chunk = first // vpp, last // vpp, middle_layers // vpp
            total_chunks = first_chunk + middle_chunk + last_chunk
            if pp_rank == 0:
                return vp_stage * total_chunks
            if middle_stages == 0:  # Megatron divides by it here (ZeroDivisionError): no such job ran
                raise StageError("uneven virtual pipeline stages need a middle pipeline stage")
            return vp_stage * total_chunks + first_chunk + middle_rank * (middle_chunk // middle_stages)
        per_rank = middle_layers // middle_stages if middle_stages > 0 else 0
        return 0 if pp_rank == 0 else middle_rank * per_rank + first
    blocks = layout.num_layers + layout.embedding_in_split + layout.loss_in_split
    per_rank = blocks // layout.pp
    if vpp is not None:
        offset = vp_stage * (blocks // vpp) + pp_rank * (per_rank // vpp)
        return offset - (layout.embedding_in_split and not (vp_stage == 0 and pp_rank == 0))
    return pp_rank * per_rank - (layout.embedding_in_split and pp_rank != 0)
