"""`apply_policy` on one pipeline stage: the stage's modules (Megatron-shaped chunks: `module.decoder.layers.<i>`,
from 0 on every stage, with or without Megatron's global `layer_number`) reached under the policy's global names,
other stages' layers set apart, and a refusal when the stage cannot be told."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
from torch import nn

from fp8_policy.client.apply import StageUnknown, UnmatchedLayers, apply_policy
from fp8_policy.client.apply.pipeline import BLOCK_CONTAINERS, block_at
from fp8_policy.policy import names as policy_names
from tests.client.apply.test_te import EVERYTHING, Recorder

BLOCKS = "model.module.decoder.layers"
RECIPE = {"name": "current", "class": "transformer_engine.common.recipe.Float8CurrentScaling", "kwargs": {}}


class _Layer(nn.Module):
    def __init__(self, layer_number: int | None, width: int = 16) -> None:
        super().__init__()
        if layer_number is not None:
            self.layer_number = layer_number  # megatron TransformerLayer: index + 1 + offset (global)
        self.self_attention = nn.Module()
        self.self_attention.linear_qkv = nn.Linear(width, width)
        self.mlp = nn.Module()
        self.mlp.linear_fc2 = nn.Linear(width, width)


class _Chunk(nn.Module):
    """DDP(GPTModel) of one stage: module.decoder.layers (a ModuleList from 0), the output layer on the last."""

    def __init__(self, blocks: range, numbered: bool, last: bool = False) -> None:
        super().__init__()
        self.module = nn.Module()
        self.module.decoder = nn.Module()
        self.module.decoder.layers = nn.ModuleList(_Layer(b + 1 if numbered else None) for b in blocks)
        if last:
            self.module.output_layer = nn.Linear(16, 16)


def _policy(skips: list[str], naming: str, stages: list[list[list[int]]], **extra: object) -> dict[str, object]:
    parallel = {
        "source": "metadata",
        "naming": naming,
        "exact": True,
        "caveat": None,
        "block_base": 1 if naming == "layer_number" else 0,
        "pp": len(stages),
        "stages": stages,
        **extra,
    }
    return {"fp8_skip_layers": skips, "gemm_overrides": [], "recipe": RECIPE, "parallel": parallel}


PP2 = [[[0, 4]], [[4, 8]]]


def _wrapped(model: nn.Module | list[nn.Module], policy: dict[str, object], **kwargs: object):
    return apply_policy(model, policy, backend="te", context_factory=Recorder(), **EVERYTHING, **kwargs)


def test_layer_number_blocks_need_nothing_else() -> None:
    """Megatron's global layer_number names the blocks on every stage: each stage applies its own layers."""
    policy = _policy([f"{BLOCKS}.4.mlp.linear_fc2", f"{BLOCKS}.8.self_attention.linear_qkv"], "layer_number", PP2)
    first = _wrapped(_Chunk(range(0, 4), True), policy)
    assert first.wrapped == ["module.decoder.layers.3.mlp.linear_fc2"]
    assert first.other_stages == [f"{BLOCKS}.8.self_attention.linear_qkv"] and "layer_number" in (first.stage or "")
    last = _wrapped(_Chunk(range(4, 8), True, last=True), policy)
    assert last.wrapped == ["module.decoder.layers.3.self_attention.linear_qkv"]
    assert [m.name for m in last.matched] == [f"{BLOCKS}.8.self_attention.linear_qkv"]


def test_local_blocks_need_the_stage() -> None:
    policy = _policy([f"{BLOCKS}.3.mlp.linear_fc2", f"{BLOCKS}.7.self_attention.linear_qkv"], "local", PP2)
    with pytest.raises(StageUnknown, match="carry no layer_number"):
        _wrapped(_Chunk(range(4, 8), False), policy)
    for how in ({"pp_rank": 1}, {"layer_offset": 4}):
        report = _wrapped(_Chunk(range(4, 8), False), policy, **how)
        assert report.wrapped == ["module.decoder.layers.3.self_attention.linear_qkv"], how
        assert [m.name for m in report.matched] == [f"{BLOCKS}.7.self_attention.linear_qkv"]
        assert report.other_stages == [f"{BLOCKS}.3.mlp.linear_fc2"]
    with pytest.raises(StageUnknown, match="0 to 1"):
        _wrapped(_Chunk(range(4, 8), False), policy, pp_rank=2)


def test_the_stage_comes_from_megatron_parallel_state(monkeypatch: pytest.MonkeyPatch) -> None:
    state = types.ModuleType("megatron.core.parallel_state")
    functions = {
        "model_parallel_is_initialized": lambda: True,
        "get_tensor_model_parallel_world_size": lambda: 1,
        "get_pipeline_model_parallel_world_size": lambda: 2,
        "get_virtual_pipeline_model_parallel_world_size": lambda: None,
        "get_context_parallel_world_size": lambda: 1,
        "get_expert_model_parallel_world_size": lambda: 1,
        "get_tensor_model_parallel_rank": lambda: 0,
        "get_pipeline_model_parallel_rank": lambda: 1,
        "get_data_parallel_rank": lambda: 0,
        "get_context_parallel_rank": lambda: 0,
        "get_expert_model_parallel_rank": lambda: 0,
        "get_virtual_pipeline_model_parallel_rank": lambda: None,
    }
    for name, function in functions.items():
        setattr(state, name, function)
    core = types.ModuleType("megatron.core")
    core.parallel_state = state  # type: ignore[attr-defined]
    for name, module in {"megatron": types.ModuleType("megatron"), "megatron.core": core}.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setitem(sys.modules, "megatron.core.parallel_state", state)
    import torch.distributed as dist

    monkeypatch.setattr(dist, "get_rank", lambda: 2, raising=False)
    monkeypatch.setattr(dist, "get_world_size", lambda: 4, raising=False)
    policy = _policy([f"{BLOCKS}.7.self_attention.linear_qkv"], "local", PP2)
    report = _wrapped(_Chunk(range(4, 8), False), policy)
    assert report.wrapped == ["module.decoder.layers.3.self_attention.linear_qkv"]
    assert report.stage == "megatron.core.parallel_state"


def test_virtual_pipeline_chunks() -> None:
    """PP2 x VPP2, 8 blocks: pipeline rank 1 holds blocks 2-3 (chunk 0) and 6-7 (chunk 1)."""
    stages = [[[0, 2], [4, 6]], [[2, 4], [6, 8]]]
    numbered = _policy([f"{BLOCKS}.7.mlp.linear_fc2"], "layer_number", stages, vpp=2)  # global block 6
    chunks = [_Chunk(range(2, 4), True), _Chunk(range(6, 8), True)]
    report = _wrapped(chunks, numbered)
    assert report.wrapped == ["module.decoder.layers.0.mlp.linear_fc2"]
    assert report.matched[0].fqn == "module.decoder.layers.0.mlp.linear_fc2"
    assert chunks[1].module.decoder.layers[0].mlp.linear_fc2.__dict__.get("forward") is not None
    assert chunks[0].module.decoder.layers[0].mlp.linear_fc2.__dict__.get("forward") is None
    by_key = _policy([f"{BLOCKS}.6.mlp.linear_fc2"], "global", stages, vpp=2)
    one = _Chunk(range(6, 8), False)
    with pytest.raises(StageUnknown, match="vp_stage="):
        _wrapped(one, by_key, pp_rank=1)
    assert _wrapped(one, by_key, pp_rank=1, vp_stage=1).wrapped == ["module.decoder.layers.0.mlp.linear_fc2"]


def test_a_model_of_another_stage_is_refused() -> None:
    policy = _policy([f"{BLOCKS}.4.mlp.linear_fc2"], "layer_number", PP2)
    with pytest.raises(StageUnknown, match="not pipeline rank 0's"):
        _wrapped(_Chunk(range(4, 8), True), policy, pp_rank=0)


def test_the_output_layer_is_the_last_stage_s() -> None:
    policy = _policy(["model.module.output_layer"], "layer_number", PP2)
    first = _wrapped(_Chunk(range(0, 4), True), policy)
    assert first.wrapped == [] and first.other_stages == ["model.module.output_layer"]
    assert _wrapped(_Chunk(range(4, 8), True, last=True), policy).wrapped == ["module.output_layer"]
    with pytest.raises(UnmatchedLayers, match="output_layer"):
        _wrapped(_Chunk(range(4, 8), True), policy)


def test_without_pipeline_parallelism_nothing_changes() -> None:
    policy = {"fp8_skip_layers": [f"{BLOCKS}.1.mlp.linear_fc2"], "gemm_overrides": [], "recipe": RECIPE}
    report = _wrapped(_Chunk(range(0, 2), True), policy)
    assert report.wrapped == ["module.decoder.layers.0.mlp.linear_fc2"] and report.stage is None
    with pytest.raises(StageUnknown, match="no pipeline stages"):
        _wrapped(_Chunk(range(0, 2), True), policy, pp_rank=1)
    caveat = _policy([f"{BLOCKS}.1.mlp.linear_fc2"], "local", PP2, caveat="the job's parallel layout is unknown")
    with pytest.raises(StageUnknown, match="layout is unknown"):
        _wrapped(_Chunk(range(0, 4), False), caveat, pp_rank=0)


def test_torchao_keeps_the_stage_s_module(tmp_path: Path) -> None:
    pytest.importorskip("torchao")
    policy = _policy([f"{BLOCKS}.6.mlp.linear_fc2"], "local", PP2)
    report = apply_policy(_Chunk(range(4, 8), False), policy, backend="torchao", pp_rank=1)
    assert report.kept == ["module.decoder.layers.2.mlp.linear_fc2"]
    assert "module.decoder.layers.3.mlp.linear_fc2" in report.converted


def test_the_policy_the_service_writes_is_applied_on_its_stage(tmp_path: Path) -> None:
    """The recommendation JSON of a TP1 x PP2 x DP2 job named locally (block 3 failing): stage 1 keeps nothing,
    stage 0 keeps its local block 3."""
    from fp8_policy.policy.parallel import LOCAL, ParallelLayout
    from fp8_policy.policy.recommend import recommend
    from fp8_policy.policy.synthetic import Scenario, SyntheticRun, all_of, blocks, level, roles
    from fp8_policy.policy.synthetic.parallel import ParallelJob
    from tests.policy.parallel.job_data import job_run_data

    profile = Scenario()
    for tensor in ("activation", "gradient"):
        profile = profile.plant(all_of(blocks(3), roles("fc2")), tensor, "underflows%", level(6.0))
    run = SyntheticRun(family="megatron", num_layers=8, first_index=0, iterations=200, profile=profile)
    meta = {"pipeline_model_parallel_size": 2, "num_layers": 8, "world_size": 4}
    data = job_run_data(ParallelJob(run, ParallelLayout(pp=2, dp=2, num_layers=8), naming=LOCAL), tmp_path, meta)
    policy = recommend(data.run).to_dict()
    stage0 = _wrapped(_Chunk(range(0, 4), False), policy, pp_rank=0, allow_unmatched=True)
    assert "module.decoder.layers.3.mlp.linear_fc2" in stage0.wrapped
    stage1 = _wrapped(_Chunk(range(4, 8), False, last=True), policy, pp_rank=1, allow_unmatched=True)
    assert not any(".mlp.linear_fc2" in fqn for fqn in stage1.wrapped)
    assert f"{BLOCKS}.3.mlp.linear_fc2" in stage1.other_stages


def test_the_client_reads_block_numbers_as_the_service_writes_them() -> None:
    assert policy_names._BLOCK_CONTAINERS == BLOCK_CONTAINERS
    for name in (
        f"{BLOCKS}.12.mlp.linear_fc2",
        "model.transformer.h.0.attn.c_attn",
        "model.encoder.layer.3.output.dense",
        "model.blocks.7.ffn",
        "model.lm_head",
        "model.layers.².fc1",
        "model.layers.x.fc1",
    ):
        assert block_at(name) == policy_names.block_index_at(name), name
