"""The answer's one cost: GEMM FLOP shares from dims (checked by hand) or layer counts, each layer at the precision
it runs at, and the GEMM speed one speedup table implies."""

from __future__ import annotations

import pytest

from fp8_policy.policy.analysis import analyze
from fp8_policy.policy.recommend.cost import SOURCE, answer_cost, gemm_flops
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


def expected_cost(layout, plan: SkipPlan, recipe: str, dims: ModelDims, capability: float | None = None) -> dict:
    """The cost of a plan with every other layer at `recipe` (no ladder rungs), trained in `recipe`."""
    if capability is None:
        capability = 10.0 if recipe in ("mxfp8", "nvfp4") else 9.0
    runs_at = dict.fromkeys(plan.bf16_layers, "bf16")
    return answer_cost(layout, runs_at, plan.overrides, recipe, recipe, dims, capability)


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
    time_rel = (5 / 6) / 1.57 + 1 / 6  # GEMM time relative to all-BF16
    assert cost["gemm_time_vs_all_fp8"] == pytest.approx(time_rel * 1.57, abs=1e-4)  # 1.095
    assert cost["gemm_slowdown_vs_all_fp8_pct"] == pytest.approx(9.5, abs=0.01)
    assert cost["gemm_speedup_vs_all_bf16"] == pytest.approx(1 / time_rel, abs=1e-4)
    assert cost["fp8_gemm_speedup"] == 1.57 and cost["speedup_measured_on"] == "H200"
    assert cost["gemm_share"] == {
        "fp4": 0.0,
        "fp8": pytest.approx(5 / 6, abs=1e-4),
        "bf16": pytest.approx(1 / 6, abs=1e-4),
    }
    assert cost["gemm_time_vs_as_logged"] == cost["gemm_time_vs_all_fp8"]  # trained in the same recipe
    assert "https://nvidia.github.io/TransformerEngine/features/low_precision_training/speedups.html" in cost["source"]
    assert cost["source"] == SOURCE


def test_override_counts_only_its_gemms() -> None:
    override = GemmOverride(name("megatron", 1, "fc1"), ("dgrad", "wgrad"), "gradient")
    cost = expected_cost(tiny_layout(), plan((name("megatron", 0, "fc2"),), (override,)), "mxfp8", DIMS)
    assert cost["bf16_gemm_share"] == pytest.approx((3 * 128 + 2 * 128) / (3 * 768), abs=1e-4)  # 0.2778
    assert cost["fp8_gemm_speedup"] == 1.44 and cost["speedup_measured_on"] == "B300"


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


def test_the_cost_says_which_application_it_counts_and_names_the_heads_megatron_runs_in_bf16() -> None:
    """The cost is stated once, for every format: it says the application it counts (each layer as apply_policy's TE
    backend runs it) and names the heads Megatron and bionemo run in BF16 whatever was asked, instead of letting the
    shares pass for every format's."""
    layout = tiny_layout(with_heads=True)
    head = heads("megatron")[0]
    fc2 = name("megatron", 0, "fc2")
    text = expected_cost(layout, plan((fc2,)), "current", DIMS)["assumptions"]
    assert "apply_policy" in text and f"Hydra recipe run {head} in BF16" in text and "fp8_layers" in text
    assert head not in expected_cost(layout, plan((fc2, head)), "current", DIMS)["assumptions"]


def test_each_layer_counts_at_its_rung_with_one_table() -> None:
    """An NVFP4 / MXFP8 / BF16 mix on Blackwell: FP4 and FP8 shares, the speedups used (block from the H200 row, the
    only one that has it), the time against every layer at the outer recipe and against the run as logged."""
    layout = tiny_layout()
    names_ = list(layout.levels)
    runs_at = dict.fromkeys(names_[:4], "nvfp4") | {names_[4]: "block", names_[5]: "bf16"}
    cost = answer_cost(layout, runs_at, (), "mxfp8", "current", ModelDims(), 10.0)
    assert cost["gemm_share"] == {"fp4": 0.5, "fp8": 0.375, "bf16": 0.125}
    time = 4 / 8 / 2.03 + 1 / 8 / 1.41 + 1 / 8 + 2 / 8 / 1.44  # layers 6 and 7 at the outer recipe
    assert cost["gemm_speedup_vs_all_bf16"] == pytest.approx(1 / time, abs=1e-4)
    assert cost["gemm_time_vs_all_fp8"] == pytest.approx(time * 1.44, abs=1e-4)
    assert cost["gemm_time_vs_as_logged"] == pytest.approx(time * 1.41, abs=1e-4)
    assert cost["speedups"]["block"] == {"vs_bf16": 1.41, "measured_on": "H200"}
    assert cost["speedups"]["nvfp4"] == {"vs_bf16": 2.03, "measured_on": "B300"}


def test_one_speedup_figure_per_answer_from_one_table() -> None:
    """The real ESM-2 log used to say 1.58x (+7.08 %) in one line and 1.37x in the ladder's, from two tables that
    differed (MXFP8 1.42x vs 1.44x): now the JSON, the ladder, the rationale and the summary tell one figure."""
    import json
    import re

    from bench.eval_ingest import parse_tree
    from fp8_policy.client.gate import change_section
    from fp8_policy.policy.recommend import RecommendOptions, recommend
    from tests.support.archives import ESM2

    run = parse_tree(ESM2)
    body = json.loads(json.dumps(recommend(run, None, RecommendOptions.from_metadata(run.metadata)).to_dict()))
    cost, ladder = body["expected_cost"], body["precision_ladder"]["expected_cost"]
    assert cost["gemm_speedup_vs_all_bf16"] == ladder["gemm_speedup_vs_all_bf16"]
    assert cost["gemm_share"] == ladder["gemm_share"] and cost["bf16_gemm_share"] == cost["gemm_share"]["bf16"]
    summary = "\n".join(change_section(body) + body["rationale"])
    figures = set(re.findall(r"(\d+\.\d+)x faster than all-BF16", summary))
    assert figures == {f"{cost['gemm_speedup_vs_all_bf16']:.2f}", f"{cost['gemm_speedup_vs_all_bf16']:.3g}"} - {""}
    assert len({float(f) for f in figures}) == 1
    quoted = set(re.findall(r"Transformer Engine docs, 'GEMM Speedups[^)]*\)[^)]*speedups\.html", json.dumps(body)))
    assert quoted == {SOURCE}  # one table, the same citation wherever it is quoted
