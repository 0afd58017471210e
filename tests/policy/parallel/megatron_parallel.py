"""A test-side re-implementation of how Megatron-LM places ranks and transformer blocks, to check policy/parallel.

Read from NVIDIA/Megatron-LM (main, d98e8a6) and rewritten here as plainly as possible:
* megatron/core/parallel_state.py: `generate_masked_orthogonal_rank_groups(world_size, parallel_size, mask)` and
  `RankGenerator.get_ranks(token)` (an order such as "tp-cp-ep-dp-pp" lists the dimensions fastest first; the
  tokens an order leaves out are appended with size 1); `initialize_model_parallel` builds a dense generator
  (tp, cp, dp = world / (tp*pp*cp), pp; ep 1) and an expert one (expert tp, ep, expert dp, pp; cp 1).
  A rank's coordinate in a dimension is its index within its group of that dimension.
* megatron/core/transformer/transformer_layer.py `get_transformer_layer_offset(config, vp_stage, pp_rank)`.
* megatron/core/transformer/transformer_block.py `get_num_layers_to_build(config, vp_stage, pp_rank)` and
  `TransformerBlock._build_layers` (a ModuleList indexed from 0; `layer_number = i + 1 + offset`).
* megatron/core/transformer/pipeline_parallel_layer_layout.py `PipelineParallelLayerLayout` (flat stage `s` is
  pipeline rank `s % pp`, virtual stage `s // pp`; `get_layer_offset` / `get_num_layers_to_build`).
The service's mapping (policy/parallel) is written independently; tests compare the two.
"""

from __future__ import annotations

from dataclasses import dataclass


# --- ranks -------------------------------------------------------------------------------------------------------
def masked_orthogonal_groups(world_size: int, parallel_size: list[int], mask: list[bool]) -> list[list[int]]:
    def prefix_product(values: list[int]) -> list[int]:
        out, acc = [1], 1
        for v in values:
            acc *= v
            out.append(acc)
        return out

    def decompose(index: int, shape: list[int]) -> list[int]:
        strides = prefix_product(shape)
        return [(index // d) % s for s, d in zip(shape, strides, strict=False)]

    masked = [s for s, m in zip(parallel_size, mask, strict=True) if m]
    unmasked = [s for s, m in zip(parallel_size, mask, strict=True) if not m]
    global_stride = prefix_product(parallel_size)
    masked_stride = [d for d, m in zip(global_stride, mask, strict=False) if m]
    unmasked_stride = [d for d, m in zip(global_stride, mask, strict=False) if not m]
    group_size = prefix_product(masked)[-1]
    num_groups = world_size // group_size
    groups = []
    for group_index in range(num_groups):
        decomposed_group = decompose(group_index, unmasked)
        rank_group = []
        for rank_in_group in range(group_size):
            decomposed_rank = decompose(rank_in_group, masked)
            rank_group.append(
                sum(x * y for x, y in zip(decomposed_rank, masked_stride, strict=True))
                + sum(x * y for x, y in zip(decomposed_group, unmasked_stride, strict=True))
            )
        groups.append(rank_group)
    return groups


def rank_groups(sizes: dict[str, int], order: str, token: str) -> list[list[int]]:
    order_tokens = order.split("-")
    for name in ("tp", "pp", "dp", "ep", "cp"):
        if name not in order_tokens:
            order_tokens.append(name)
    ordered = [sizes.get(t, 1) for t in order_tokens]
    world = 1
    for s in ordered:
        world *= s
    mask = [t == token for t in order_tokens]
    return masked_orthogonal_groups(world, ordered, mask)


def coordinate(sizes: dict[str, int], order: str, token: str, rank: int) -> int:
    for group in rank_groups(sizes, order, token):
        if rank in group:
            return group.index(rank)
    raise AssertionError(f"rank {rank} in no {token} group")


def dense_coordinates(world: int, tp: int, pp: int, cp: int, order: str, rank: int) -> dict[str, int]:
    sizes = {"tp": tp, "pp": pp, "cp": cp, "dp": world // (tp * pp * cp), "ep": 1}
    return {token: coordinate(sizes, order, token, rank) for token in ("tp", "cp", "dp", "pp")}


def expert_coordinates(world: int, etp: int, ep: int, pp: int, order: str, rank: int) -> dict[str, int]:
    sizes = {"tp": etp, "ep": ep, "pp": pp, "dp": world // (etp * ep * pp), "cp": 1}
    return {token: coordinate(sizes, order, token, rank) for token in ("tp", "ep", "dp")}


# --- blocks ------------------------------------------------------------------------------------------------------
@dataclass
class Config:
    num_layers: int
    pipeline_model_parallel_size: int
    virtual_pipeline_model_parallel_size: int | None = None
    num_layers_in_first_pipeline_stage: int | None = None
    num_layers_in_last_pipeline_stage: int | None = None
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    layout: list[list[list[str]]] | None = None  # [pp][vp] -> layer types, Megatron's 2-D form


def layout_2d(flat: list[list[str]], pp: int) -> list[list[list[str]]]:
    vpp = len(flat) // pp
    return [[flat[v * pp + p] for v in range(vpp)] for p in range(pp)]


def layer_offset(config: Config, vp_stage: int | None, pp_rank: int) -> int:
    pp = config.pipeline_model_parallel_size
    if pp <= 1:
        return 0
    if config.layout is not None:
        vp = vp_stage or 0
        offset = 0
        for v in range(vp + 1):
            for p in range(pp if v < vp else pp_rank):
                offset += config.layout[p][v].count("t")
        return offset
    vp_size = config.virtual_pipeline_model_parallel_size
    first, last = config.num_layers_in_first_pipeline_stage, config.num_layers_in_last_pipeline_stage
    if first is not None or last is not None:
        middle_stages = pp - (first is not None) - (last is not None)
        n_first, n_last = first or 0, last or 0
        middle_layers = config.num_layers - n_first - n_last
        middle_rank = pp_rank if first is None else pp_rank - 1
        if vp_size is not None:
            assert vp_stage is not None
            chunk_first, chunk_last = (
                (0 if first is None else first // vp_size),
                (0 if last is None else last // vp_size),
            )
            chunk_middle = middle_layers // vp_size
            total = chunk_first + chunk_middle + chunk_last
            if pp_rank == 0:
                return vp_stage * total
            return vp_stage * total + chunk_first + middle_rank * (chunk_middle // middle_stages)
        per_rank = middle_layers // middle_stages if middle_stages > 0 else 0
        return 0 if pp_rank == 0 else middle_rank * per_rank + n_first
    layers = (
        config.num_layers + config.account_for_embedding_in_pipeline_split + config.account_for_loss_in_pipeline_split
    )
    per_rank = layers // pp
    if vp_size is not None:
        assert vp_stage is not None
        offset = vp_stage * (layers // vp_size) + pp_rank * (per_rank // vp_size)
        if config.account_for_embedding_in_pipeline_split and not (vp_stage == 0 and pp_rank == 0):
            offset -= 1
        return offset
    offset = pp_rank * per_rank
    if config.account_for_embedding_in_pipeline_split and pp_rank != 0:
        offset -= 1
    return offset


def layers_to_build(config: Config, vp_stage: int | None, pp_rank: int) -> int:
    pp = config.pipeline_model_parallel_size
    if config.layout is not None:
        return config.layout[pp_rank][vp_stage or 0].count("t")
    first_stage, last_stage = pp_rank == 0, pp_rank == pp - 1
    first, last = config.num_layers_in_first_pipeline_stage, config.num_layers_in_last_pipeline_stage
    if first is not None or last is not None:
        left, stages = config.num_layers, pp
        if first is not None:
            left, stages = left - first, stages - 1
        if last is not None:
            left, stages = left - last, stages - 1
        if stages > 0:
            assert left % stages == 0
            per_rank = left // stages
        else:
            per_rank = 0
        if first_stage and first is not None:
            per_rank = first
        if last_stage and last is not None:
            per_rank = last
    else:
        layers = (
            config.num_layers
            + config.account_for_embedding_in_pipeline_split
            + config.account_for_loss_in_pipeline_split
        )
        assert layers % pp == 0
        per_rank = layers // pp
    vp_size = config.virtual_pipeline_model_parallel_size
    if vp_size is not None and pp > 1:
        assert per_rank % vp_size == 0
        count = per_rank // vp_size
    else:
        count = per_rank
    vp_last = vp_size is None or vp_stage == vp_size - 1
    if config.account_for_embedding_in_pipeline_split and (vp_stage in (None, 0)) and first_stage:
        count -= 1
        assert count >= 0, "Not enough layers in the first virtual pipeline stage"
    if config.account_for_loss_in_pipeline_split and vp_last and last_stage:
        count -= 1
        assert count >= 0, "Not enough layers in the last virtual pipeline stage"
    return count


def layer_numbers(config: Config, pp_rank: int, vp_stage: int | None) -> list[int]:
    """`layer_number` of each module of the stage's ModuleList, in index order (1-based, global)."""
    offset = layer_offset(config, vp_stage, pp_rank)
    return [i + 1 + offset for i in range(layers_to_build(config, vp_stage, pp_rank))]
