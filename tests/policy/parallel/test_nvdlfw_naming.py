"""The naming conventions of policy/parallel/naming.py, checked with the real nvdlfw_inspect on Megatron-shaped
model chunks: `layer_number` children get global 1-based names on every stage, plain ModuleList children local
ones; and the synthetic parallel job writer logs exactly those names."""

from __future__ import annotations

import pytest
from torch import nn

from fp8_policy.policy.parallel import LAYER_NUMBER, LOCAL, ParallelLayout, rank_chunks
from fp8_policy.policy.synthetic import SyntheticRun
from fp8_policy.policy.synthetic.parallel import ParallelJob, write_parallel_job


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


def _nvdlfw_gemm_names(chunks: list[nn.Module], tmp_path) -> set[str]:
    import nvdlfw_inspect.api as debug_api
    from nvdlfw_inspect.logging import initialize_logger

    initialize_logger(str(tmp_path))
    debug_api.infer_and_assign_layer_names(chunks)
    return {
        m.name
        for chunk in chunks
        for m in chunk.modules()
        if isinstance(m, nn.Linear) and isinstance(getattr(m, "name", None), str)
    }


@pytest.mark.parametrize(("naming", "numbered"), [(LAYER_NUMBER, True), (LOCAL, False)])
@pytest.mark.parametrize("vpp", [None, 2])
def test_the_writer_logs_what_nvdlfw_inspect_names(naming: str, numbered: bool, vpp: int | None, tmp_path) -> None:
    if naming == LOCAL and vpp:
        pytest.skip("local names of several chunks collide: covered by the resolve tests")
    layout = ParallelLayout(pp=2, dp=1, vpp=vpp, num_layers=8)
    run = SyntheticRun(family="megatron", num_layers=8, first_index=0, iterations=0)
    written = write_parallel_job(ParallelJob(run, layout, naming=naming), tmp_path / "logs")
    for pp_rank in range(2):
        chunks = [_Chunk([b + 1 for b in blocks], numbered) for blocks in rank_chunks(layout, pp_rank)]
        expected = _nvdlfw_gemm_names(chunks, tmp_path / f"nvdlfw{pp_rank}")
        assert set(written.logged_to_global[pp_rank]) == expected
