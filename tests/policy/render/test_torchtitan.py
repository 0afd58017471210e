"""The torchtitan format: torchtitan 0.3's converter configs, run through a re-implementation of its converters
(torchtitan_loader.py): every logged module ends at the precision the decision runs it at (float8 rowwise for the
per-tensor and block rungs), include and exclude lists the right way round, never an empty include list."""

from __future__ import annotations

import pytest

from bench.torchtitan_loader import apply
from fp8_policy.policy.render import applied_by_format, render
from fp8_policy.policy.render.layout import is_one_based, torch_fqn
from fp8_policy.policy.render.precision import precision_of
from tests.policy.render import factory as f

FLOAT8 = ("block", "current", "delayed")
PREFIX = "model.model.layers"


def decision_for(outer: str, rungs: dict[str, str] | None = None, skip: tuple[str, ...] = ()):
    layers = f.family_layers("hf", 4)
    base = f.decision(layers, skip, [f.override(f"{PREFIX}.2.mlp.up_proj", "wgrad")], f.recipe(outer))
    return f.with_ladder(base, rungs or {})


def linears(decision) -> dict[str, tuple[int, int]]:
    one_based = is_one_based(decision)
    out = {torch_fqn(layer.name, layer.structure.index, one_based): (256, 256) for layer in decision.layers}
    out["unlogged.router.gate"] = (256, 64)  # a Linear the analysed run never logged
    return out


def want(decision, fmt: str) -> str:
    return "float8" if fmt in FLOAT8 else fmt


@pytest.mark.parametrize("outer", ["current", "block", "mxfp8", "nvfp4"])
def test_every_logged_module_ends_at_its_precision(outer: str) -> None:
    rungs = {
        f"{PREFIX}.0.self_attn.q_proj": "nvfp4",
        f"{PREFIX}.1.mlp.down_proj": "mxfp8",
        f"{PREFIX}.3.self_attn.o_proj": "current",
    }
    decision = decision_for(outer, rungs, skip=(f"{PREFIX}.3.mlp.down_proj",))
    text = render(decision, "torchtitan").content
    result, _grouped = apply(text, linears(decision), experts=False)
    runs_at = precision_of(decision)
    one_based = is_one_based(decision)
    moved = []
    for layer in decision.layers:
        fqn = torch_fqn(layer.name, layer.structure.index, one_based)
        expected = want(decision, runs_at[layer.name])
        if expected == "float8" and outer not in FLOAT8:
            expected, _ = "bf16", moved.append(layer.name)  # said as an approximation
        assert result[fqn] == expected, (fqn, result[fqn], expected)
    # an unlogged Linear: float8 under the exclude-list converter, BF16 under include lists
    assert result["unlogged.router.gate"] == ("float8" if outer in FLOAT8 else "bf16")
    formats = applied_by_format(decision)["torchtitan"]
    assert f"{PREFIX}.2.mlp.up_proj" in formats["overrides_as_whole_layers"]
    for name in moved:
        assert name in formats["approximation"]


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
