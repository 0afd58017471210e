"""Megatron-shaped model chunks named by the real nvdlfw_inspect, for the tests of policy/parallel's naming.

`stage_names(layout, pp_rank, numbered, log_dir)`: the names `infer_and_assign_layer_names` gives the GEMM modules
of pipeline stage `pp_rank`, its chunks built as Megatron hands them over (DDP(GPTModel): model.module.decoder.
layers.<i>), with a `layer_number` on every block (megatron/core/transformer/transformer_layer.py: i + 1 + offset)
when `numbered`, plain ModuleList children otherwise.
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from fp8_policy.policy.parallel import ParallelLayout, rank_chunks


class _Layer(nn.Module):
    def __init__(self, layer_number: int | None) -> None:
        super().__init__()
        if layer_number is not None:
            self.layer_number = layer_number  # megatron TransformerLayer: i + 1 + offset
        self.self_attention = nn.Module()
        self.self_attention.linear_qkv = nn.Linear(2, 2)
        self.self_attention.linear_proj = nn.Linear(2, 2)
        self.mlp = nn.Module()
        self.mlp.linear_fc1 = nn.Linear(2, 2)
        self.mlp.linear_fc2 = nn.Linear(2, 2)


class _Chunk(nn.Module):
    """DDP(GPTModel) as Megatron hands it to `infer_and_assign_layer_names`: model.module.decoder.layers.<i>."""

    def __init__(self, numbers: list[int], numbered: bool) -> None:
        super().__init__()
        self.module = nn.Module()
        self.module.decoder = nn.Module()
        self.module.decoder.layers = nn.ModuleList(_Layer(n if numbered else None) for n in numbers)


def stage_names(layout: ParallelLayout, pp_rank: int, numbered: bool, log_dir: Path) -> set[str]:
    """The names the real nvdlfw_inspect gives the GEMM modules of stage `pp_rank` (its logger writes to
    `log_dir`)."""
    import nvdlfw_inspect.api as debug_api
    from nvdlfw_inspect.logging import initialize_logger

    chunks = [_Chunk([b + 1 for b in blocks], numbered) for blocks in rank_chunks(layout, pp_rank)]
    initialize_logger(str(log_dir))
    debug_api.infer_and_assign_layer_names(chunks)
    return {
        m.name
        for chunk in chunks
        for m in chunk.modules()
        if isinstance(m, nn.Linear) and isinstance(getattr(m, "name", None), str)
    }
