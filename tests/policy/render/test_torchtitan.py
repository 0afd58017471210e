"""The torchtitan format: torchtitan 0.3's converter configs, run through a re-implementation of its converters
(torchtitan_loader.py): every logged module ends at the precision the decision runs it at (float8 rowwise for the
per-tensor and block rungs), include and exclude lists the right way round, never an empty include list."""

from __future__ import annotations

import pytest

from bench.torchtitan_loader import apply, model_linears
from fp8_policy.policy.render import applied_by_format, render
from fp8_policy.policy.render.precision import precision_of
from tests.policy.render import factory as f

FLOAT8 = ("block", "current", "delayed")
PREFIX = "model.model.layers"


def decision_for(outer: str, rungs: dict[str, str] | None = None, skip: tuple[str, ...] = ()):
    layers = f.family_layers("hf", 4)
    base = f.decision(layers, skip, [f.override(f"{PREFIX}.2.mlp.up_proj", "wgrad")], f.recipe(outer))
    return f.with_ladder(base, rungs or {})


def linears(decision, fused_qkv: bool = True, model: str = "llama3") -> dict[str, tuple[int, int]]:
    out = model_linears(4, model, fused_qkv)
    out["unlogged.router.gate"] = (256, 64)  # a Linear the analysed run never logged
    return out


def layers_of(family: str, n: int = 4):
    from fp8_policy.policy.names import layer_structure
    from fp8_policy.policy.records import LayerInfo, Precision

    prefix, subs, heads = f.FAMILIES.get(family, (None, None, None))
    if prefix is None:  # Hugging Face Llama with q/k/v and gate/up/down
        prefix, heads = PREFIX, ("model.lm_head",)
        subs = tuple(f"self_attn.{p}_proj" for p in "qkvo") + tuple(f"mlp.{p}_proj" for p in ("gate", "up", "down"))
    names = [f"{prefix}.{i}.{sub}" for i in range(n) for sub in subs] + list(heads)
    return [LayerInfo(n, layer_structure(n), Precision.FP8, True) for n in names]


@pytest.mark.parametrize("fused_qkv", [True, False])
@pytest.mark.parametrize("outer", ["current", "block", "mxfp8", "nvfp4"])
def test_hf_names_land_on_torchtitans_modules_at_their_precision(outer: str, fused_qkv: bool) -> None:
    rungs = {
        f"{PREFIX}.0.self_attn.q_proj": "nvfp4",
        f"{PREFIX}.1.mlp.down_proj": "mxfp8",
        f"{PREFIX}.3.self_attn.o_proj": "current",
    }
    decision = decision_for(outer, rungs, skip=(f"{PREFIX}.3.mlp.down_proj",))
    result, _grouped = apply(render(decision, "torchtitan").content, linears(decision, fused_qkv), experts=False)
    runs_at = precision_of(decision)
    flt = "float8" if outer in FLOAT8 else "bf16"  # a float8 rung under an include-list outer recipe runs BF16
    q = runs_at[f"{PREFIX}.0.self_attn.q_proj"]
    q_key = {"nvfp4": "nvfp4", "mxfp8": "mxfp8", "bf16": "bf16"}.get(q, flt)
    for fqn in ("layers.0.attention.qkv_linear.wqkv",) if fused_qkv else ("layers.0.attention.qkv_linear.wq",):
        assert result[fqn] == q_key, (fqn, result[fqn])
    if not fused_qkv:  # k and v share q's target (only q was logged)
        assert result["layers.0.attention.qkv_linear.wkv"] == q_key
    assert result["layers.1.feed_forward.w2"] == ("mxfp8" if runs_at[f"{PREFIX}.1.mlp.down_proj"] == "mxfp8" else flt)
    assert result["layers.3.feed_forward.w2"] == "bf16"  # skipped
    assert result["layers.3.attention.wo"] == {"nvfp4": "nvfp4", "mxfp8": "mxfp8"}.get(
        runs_at[f"{PREFIX}.3.self_attn.o_proj"], flt
    )
    assert result["layers.2.feed_forward.w3"] == want(runs_at[f"{PREFIX}.2.mlp.up_proj"], outer)  # up_proj -> w3
    assert result["lm_head"] == want(runs_at["model.lm_head"], outer)
    # gate_proj (w1) was never logged: float8 under the exclude-list converter, BF16 under include lists
    assert result["layers.0.feed_forward.w1"] == result["unlogged.router.gate"] == flt
    formats = applied_by_format(decision)["torchtitan"]
    assert f"{PREFIX}.2.mlp.up_proj" in formats["overrides_as_whole_layers"]
    assert "q/k/v projections share one target" in formats["approximation"]
    assert "unmapped" not in formats["approximation"]


def want(rung: str, outer: str) -> str:
    if rung in FLOAT8:
        return "float8" if outer in FLOAT8 else "bf16"
    return rung


def test_megatron_names_map_fused_qkv_and_fc1_to_their_torchtitan_modules() -> None:
    layers = layers_of("megatron")  # 1-based logged blocks 0..3 here: 0-based, so module index = logged index
    mega = "model.module.decoder.layers"
    rungs = {f"{mega}.2.mlp.linear_fc1": "mxfp8", f"{mega}.1.self_attention.linear_proj": "nvfp4"}
    decision = f.with_ladder(f.decision(layers, [f"{mega}.1.self_attention.linear_qkv"], (), f.recipe("nvfp4")), rungs)
    text = render(decision, "torchtitan").content
    for fused in (True, False):
        result, _ = apply(text, linears(decision, fused), experts=False)
        for fqn in ("wqkv",) if fused else ("wq", "wkv"):
            assert result[f"layers.1.attention.qkv_linear.{fqn}"] == "bf16"
        assert result["layers.0.attention.qkv_linear." + ("wqkv" if fused else "wq")] == "nvfp4"
        assert result["layers.2.feed_forward.w1"] == result["layers.2.feed_forward.w3"] == "mxfp8"  # fc1 = gate + up
        assert result["layers.2.feed_forward.w2"] == "nvfp4"
        assert result["layers.1.attention.wo"] == "nvfp4"
        assert result["lm_head"] == "nvfp4"  # output_layer
    approximation = applied_by_format(decision)["torchtitan"]["approximation"]
    assert "fused q/k/v" in approximation and "fc1 (gate and up fused)" in approximation
    assert f"{mega}.2.mlp.linear_fc1" in approximation


def test_one_skipped_projection_takes_its_q_k_v_siblings_to_bf16_and_says_so() -> None:
    layers = layers_of("hf-qkv")
    decision = f.decision(layers, [f"{PREFIX}.2.self_attn.k_proj"], (), f.recipe("mxfp8"))
    result, _ = apply(render(decision, "torchtitan").content, linears(decision), experts=False)
    assert result["layers.2.attention.qkv_linear.wqkv"] == "bf16"
    assert result["layers.1.attention.qkv_linear.wqkv"] == "mxfp8"
    assert result["layers.2.feed_forward.w1"] == "mxfp8"  # gate_proj
    formats = applied_by_format(decision)["torchtitan"]
    taken = {f"{PREFIX}.2.self_attn.q_proj", f"{PREFIX}.2.self_attn.v_proj"}
    assert taken <= set(formats["extra_bf16_layers"])
    assert "taking along" in formats["approximation"]
    assert not formats["exact"]


def test_deepseek_mla_and_shared_experts_reach_torchtitans_deepseek_v3_modules() -> None:
    from fp8_policy.policy.names import layer_structure
    from fp8_policy.policy.records import LayerInfo, Precision

    mega = "model.module.decoder.layers"
    attention = [
        f"self_attention.linear_{p}" for p in ("q_down_proj", "q_up_proj", "kv_down_proj", "kv_up_proj", "proj")
    ]
    moe = ["mlp.shared_experts.linear_fc1", "mlp.shared_experts.linear_fc2", "mlp.experts.linear_fc1.gemm_0"]
    names = [f"{mega}.{i}.{sub}" for i in range(4) for sub in (*attention, *(["mlp.linear_fc1"] if i == 0 else moe))]
    layers = [LayerInfo(n, layer_structure(n), Precision.FP8, True) for n in names]
    decision = f.decision(
        layers,
        [f"{mega}.2.self_attention.linear_q_up_proj", f"{mega}.3.mlp.shared_experts.linear_fc1"],
        (),
        f.recipe("mxfp8"),
    )
    result, grouped = apply(render(decision, "torchtitan").content, linears(decision, model="deepseek_v3"), True)
    assert result["layers.2.attention.wq_b"] == "bf16"
    assert result["layers.2.attention.wq_a"] == result["layers.2.attention.wkv_b"] == "mxfp8"
    assert result["layers.3.moe.shared_experts.w1"] == result["layers.3.moe.shared_experts.w3"] == "bf16"
    assert result["layers.3.moe.shared_experts.w2"] == "mxfp8"
    assert result["layers.0.feed_forward.w1"] == "mxfp8"
    assert result["layers.1.moe.router.gate"] == "bf16"  # never logged, include-list converter
    assert grouped == "mxfp8"
    assert "unmapped" not in (applied_by_format(decision)["torchtitan"]["approximation"] or "")


def test_names_of_models_torchtitan_does_not_have_stay_as_logged_and_are_called_unmapped() -> None:
    decision = f.decision(layers_of("esm2"), [], (), f.recipe("mxfp8"))
    text = render(decision, "torchtitan").content
    assert "'esm.encoder.layers.0.self_attention.proj'" in text  # as logged, root stripped
    approximation = applied_by_format(decision)["torchtitan"]["approximation"]
    assert "unmapped" in approximation and "esm.encoder" in approximation


def test_include_lists_are_never_empty_and_lists_are_the_right_way_round() -> None:
    decision = decision_for("current")
    text = render(decision, "torchtitan").content
    assert "MXFP8LinearConverter.Config(fqns" not in text and "NVFP4LinearConverter.Config(fqns" not in text
    assert "Float8LinearConverter.Config(" in text and "filter_fqns=FLOAT8_FILTER_FQNS" in text
    nvfp4 = render(decision_for("nvfp4"), "torchtitan").content
    assert "Float8LinearConverter" not in nvfp4.split("def converters")[1]
    assert "NVFP4LinearConverter.Config(fqns=NVFP4_FQNS" in nvfp4


def test_routed_experts_go_to_the_grouped_converter_at_their_most_precise_rung() -> None:
    from fp8_policy.policy.names import layer_structure
    from fp8_policy.policy.records import LayerInfo, Precision

    names = [f"model.module.decoder.layers.1.mlp.experts.linear_fc1.gemm_{e}" for e in range(4)]
    dense = ["model.module.decoder.layers.1.self_attention.linear_qkv"]
    layers = [LayerInfo(n, layer_structure(n), Precision.FP8, True) for n in (*dense, *names)]
    decision = f.with_ladder(f.decision(layers, recipe_choice=f.recipe("nvfp4")), {names[1]: "mxfp8"})
    _result, grouped = apply(render(decision, "torchtitan").content, linears(decision), experts=True)
    assert grouped == "mxfp8"  # no NVFP4 grouped converter in torchtitan 0.3; one expert needs MXFP8 anyway
    assert "every routed expert" in applied_by_format(decision)["torchtitan"]["approximation"]
    skipped = f.decision(layers, [names[2]], recipe_choice=f.recipe("mxfp8"))
    _result, grouped = apply(render(skipped, "torchtitan").content, linears(skipped), experts=True)
    assert grouped == "bf16"
    assert set(names) <= set(applied_by_format(skipped)["torchtitan"]["bf16_layers"])
