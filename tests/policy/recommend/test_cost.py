"""Expected cost: GEMM FLOP shares from dims (checked by hand) or layer counts, and the implied GEMM speed."""

from __future__ import annotations

import pytest

from fp8_policy.policy.analysis import analyze
from fp8_policy.policy.recommend.cost import expected_cost, gemm_flops
from fp8_policy.policy.recommend.options import ModelDims
from fp8_policy.policy.recommend.skiplist import SkipPlan
from fp8_policy.policy.records import GemmOverride
from tests.policy.analysis.factories import Spec, build_run, heads, name

DIMS = ModelDims(hidden_size=4, ffn_hidden_size=16)


def tiny_layout(with_heads: bool = False):
    analysis = analyze(build_run(Spec(n_blocks=2, with_heads=with_heads)))
    assert analysis.layout is not None
    return analysis.layout


def plan(skips: tuple[str, ...] = (), overrides: tuple[GemmOverride, ...] = ()) -> SkipPlan:
    return SkipPlan(skips, skips, (), overrides, ())


def test_flops_per_sublayer_by_hand() -> None:
    layout = tiny_layout(with_heads=True)
    flops = {lv.info.structure.sublayer: gemm_flops(lv, DIMS) for lv in layout.levels.values()}
    # qkv 2*4*(4+2*4) = 96, proj 2*4*4 = 32, fc1 2*4*16 = 128, fc2 2*16*4 = 128; head needs the vocab
    assert flops == {"qkv": 96.0, "proj": 32.0, "fc1": 128.0, "fc2": 128.0, "output_layer": None}
    head = layout.levels[heads("megatron")[0]]
    assert gemm_flops(head, ModelDims(hidden_size=4, ffn_hidden_size=16, vocab_size=100)) == 800.0
    gqa = ModelDims(hidden_size=4, ffn_hidden_size=16, num_attention_heads=8, num_query_groups=2, gated_mlp=True)
    qkv, fc1 = layout.levels[name("megatron", 0, "qkv")], layout.levels[name("megatron", 0, "fc1")]
    assert gemm_flops(qkv, gqa) == 2 * 4 * (4 + 2 * 1) and gemm_flops(fc1, gqa) == 256.0


def test_skip_share_and_throughput_by_hand() -> None:
    cost = expected_cost(tiny_layout(), plan((name("megatron", 0, "fc2"),)), "current", DIMS)
    # per block 96 + 32 + 128 + 128 = 384 FLOPs per GEMM kind; 2 blocks -> 768; fc2 of block 0 = 128 -> 1/6
    assert cost["method"] == "dims"
    assert cost["bf16_gemm_share"] == pytest.approx(1 / 6, abs=1e-4)
    time_rel = (5 / 6) / 1.58 + 1 / 6  # GEMM time relative to all-BF16
    assert cost["gemm_time_vs_all_fp8"] == pytest.approx(time_rel * 1.58, abs=1e-4)  # 1.0967
    assert cost["gemm_slowdown_vs_all_fp8_pct"] == pytest.approx(9.67, abs=0.01)
    assert cost["gemm_speedup_vs_all_bf16"] == pytest.approx(1 / time_rel, abs=1e-4)  # 1.4407
    assert cost["fp8_gemm_speedup"] == 1.58 and cost["speedup_measured_on"] == "H200"
    assert "https://nvidia.github.io/TransformerEngine/features/low_precision_training/speedups.html" in cost["source"]


def test_override_counts_only_its_gemms() -> None:
    override = GemmOverride(name("megatron", 1, "fc1"), ("dgrad", "wgrad"), "gradient")
    cost = expected_cost(tiny_layout(), plan((name("megatron", 0, "fc2"),), (override,)), "mxfp8", DIMS)
    assert cost["bf16_gemm_share"] == pytest.approx((3 * 128 + 2 * 128) / (3 * 768), abs=1e-4)  # 0.2778
    assert cost["fp8_gemm_speedup"] == 1.42 and cost["speedup_measured_on"] == "B300"


def test_layer_count_fallback_without_dims() -> None:
    override = GemmOverride(name("megatron", 1, "fc1"), ("fprop", "dgrad"), "weight")
    cost = expected_cost(tiny_layout(), plan((name("megatron", 0, "fc2"),), (override,)), "delayed", ModelDims())
    assert cost["method"] == "layer_count"
    assert cost["bf16_gemm_share"] == pytest.approx((3 + 2) / 24, abs=1e-4)
    assert "no model dims" in cost["note"]


def test_partial_dims_fall_back_and_say_which_layers() -> None:
    cost = expected_cost(tiny_layout(with_heads=True), plan(), "current", DIMS)  # head needs vocab_size
    assert cost["method"] == "layer_count" and cost["missing_dims_for"] == [heads("megatron")[0]]


def test_layers_already_in_bf16_count_as_logged() -> None:
    analysis = analyze(build_run(Spec(n_blocks=4, with_heads=False, bf16_blocks=(3,))))
    assert analysis.layout is not None
    tail = tuple(name("megatron", 3, s) for s in ("qkv", "proj", "fc1", "fc2"))
    cost = expected_cost(analysis.layout, SkipPlan((), (), tail, (), ()), "block", DIMS)
    assert cost["bf16_gemm_share"] == pytest.approx(0.25) and cost["bf16_gemm_share_as_logged"] == pytest.approx(0.25)
    assert cost["moved_to_bf16_share"] == 0.0
    assert "gemm_flops_per_sequence" not in cost  # no seq_len given


def test_sequence_length_scales_flops_not_shares() -> None:
    dims = ModelDims(hidden_size=4, ffn_hidden_size=16, seq_len=8)
    cost = expected_cost(tiny_layout(), plan((name("megatron", 0, "fc2"),)), "current", dims)
    assert cost["gemm_flops_per_sequence"] == 3 * 768 * 8
    assert cost["bf16_gemm_share"] == pytest.approx(1 / 6, abs=1e-4)


def test_the_costs_say_which_application_they_count_and_name_the_heads_megatron_runs_in_bf16() -> None:
    """Each cost is stated once, for every format: it says the application it counts (the TE debug YAML's BF16 set;
    the ladder's rungs as apply_policy's TE backend runs them) and names the heads Megatron and bionemo run in BF16
    whatever was asked, instead of letting the shares pass for every format's."""
    from fp8_policy.policy.recommend.cost import ladder_cost

    layout = tiny_layout(with_heads=True)
    head = heads("megatron")[0]
    fc2 = name("megatron", 0, "fc2")
    cost = expected_cost(layout, plan((fc2,)), "current", DIMS)
    assert "TE debug YAML" in cost["assumptions"] and f"Hydra recipe run {head} in BF16" in cost["assumptions"]
    assert head not in expected_cost(layout, plan((fc2, head)), "current", DIMS)["assumptions"]
    rungs = {lv.name: "nvfp4" for lv in layout.levels.values()} | {fc2: "bf16"}
    lcost = ladder_cost(layout, rungs, (), "current", DIMS, 10.0)
    text = lcost["assumptions"]
    assert (
        "apply_policy" in text
        and f"Megatron script and bionemo's Hydra recipe run {head} in BF16" in text
        and "fp8_layers" in text
    )
    assert head not in ladder_cost(layout, rungs | {head: "bf16"}, (), "current", DIMS, 10.0)["assumptions"]
