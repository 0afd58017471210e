"""The te-recipe format: a Python module whose `qfactory(role)` gives every (layer, GEMM) of a decision its
precision under TE's CustomRecipe, loaded with a test-side stand-in of TE's machinery (te_recipe_loader.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.te_recipe_loader import HybridQuantizer, QuantizerRole, gemm_formats, loaded
from fp8_policy.policy.render import applied_by_format, render
from fp8_policy.policy.render.layout import is_one_based, torch_fqn
from fp8_policy.policy.render.precision import effective_rung
from fp8_policy.policy.render.te_recipe import gemm_plan, layer_mixes, mix_factory_name
from tests.policy.render import factory as f

PREFIX = "model.module.decoder.layers"


def ladder_decision(outer: str = "nvfp4"):
    """Megatron names, 4 blocks: block 4's fc2 skipped, a wgrad override on block 2's fc1, rungs on block 3."""
    layers = f.family_layers("megatron", 4)
    decision = f.decision(
        layers, [f"{PREFIX}.4.mlp.linear_fc2"], [f.override(f"{PREFIX}.2.mlp.linear_fc1", "wgrad")], f.recipe(outer)
    )
    rungs = {
        f"{PREFIX}.3.self_attention.linear_qkv": "mxfp8",
        f"{PREFIX}.3.mlp.linear_fc1": "current",
        f"{PREFIX}.3.mlp.linear_fc2": "delayed",
        f"{PREFIX}.1.mlp.linear_fc2": outer,
    }
    return f.with_ladder(decision, rungs)


def expected(decision, name: str) -> tuple[str, str, str]:
    outer = "current" if decision.recipe.name == "delayed" else decision.recipe.name
    if name in decision.skip_layers:
        return ("bf16",) * 3
    rung = {lp.layer: lp.precision for lp in decision.layer_precisions}.get(name, outer)
    rung = effective_rung(rung, decision.recipe.name)  # precision.py: delayed keeps an FP8 outer recipe
    rung = "current" if rung == "delayed" else rung
    gemms = next((o.gemms for o in decision.gemm_overrides if o.layer == name), ())
    return tuple("bf16" if g in gemms else rung for g in ("fprop", "dgrad", "wgrad"))  # type: ignore[return-value]


@pytest.mark.parametrize("outer", ["nvfp4", "mxfp8", "current", "delayed"])
def test_every_layer_and_gemm_runs_as_planned_by_logged_name_and_by_module_path(outer, tmp_path: Path) -> None:
    decision = ladder_decision(outer)
    with loaded(render(decision, "te-recipe").content, tmp_path) as module:
        recipe = module.recipe()
        assert recipe.qfactory is module.qfactory
        one_based = is_one_based(decision)
        for layer in decision.layers:
            if layer.structure.group.value == "head":
                continue
            want = expected(decision, layer.name)
            assert gemm_formats(module.qfactory, layer.name) == want, layer.name
            path = torch_fqn(layer.name, layer.structure.index, one_based)  # what assign_names(model) gives
            assert gemm_formats(module.qfactory, path) == want, path
            assert gemm_formats(module.qfactory, "module." + path) == want  # DDP-wrapped model
        unknown = gemm_formats(module.qfactory, "decoder.layers.9.mlp.linear_fc1")
        assert unknown == ("current" if outer == "delayed" else outer,) * 3


def test_a_gemm_override_is_a_hybrid_quantizer_with_bf16_on_its_gemm(tmp_path: Path) -> None:
    decision = ladder_decision()
    name = f"{PREFIX}.2.mlp.linear_fc1"
    assert layer_mixes(decision)[name] == ("nvfp4", "nvfp4", "bf16")
    with loaded(render(decision, "te-recipe").content, tmp_path) as module:
        quantizer = module.qfactory(QuantizerRole("linear", "input", name))
        assert isinstance(quantizer, HybridQuantizer)
        assert (quantizer.rowwise_quantizer.fmt, quantizer.columnwise_quantizer.fmt) == ("nvfp4", "bf16")
    formats = applied_by_format(decision)["te-recipe"]
    assert formats["exact"] and formats["bf16_gemms"] == [{"layer": name, "gemms": ["wgrad"]}]


def test_megatron_mix_factories_need_no_module_name(tmp_path: Path) -> None:
    decision = ladder_decision()
    plan = gemm_plan(decision)
    with loaded(render(decision, "te-recipe").content, tmp_path) as module:
        from bench.te_recipe_loader import megatron_factory

        for mix in set(plan.values()):
            factory = megatron_factory(f"fp8_policy_recipe.{mix_factory_name(mix)}")
            assert gemm_formats(factory, "") == mix  # Megatron passes no name= to TE modules
        assert megatron_factory("fp8_policy_recipe.qfactory") is module.qfactory


def test_grouped_experts_share_their_module_plan_and_say_so(tmp_path: Path) -> None:
    from dataclasses import replace

    from fp8_policy.policy.names import layer_structure
    from fp8_policy.policy.records import LayerInfo, Precision

    names = [f"{PREFIX}.1.mlp.experts.linear_fc1.gemm_{e}" for e in range(4)]
    layers = [LayerInfo(n, layer_structure(n), Precision.FP8, True) for n in names]
    decision = replace(f.decision(layers, [names[2]], recipe_choice=f.recipe("mxfp8")))
    with loaded(render(decision, "te-recipe").content, tmp_path) as module:
        module_name = f"{PREFIX}.1.mlp.experts.linear_fc1"
        assert gemm_formats(module.qfactory, module_name, "grouped_linear") == ("bf16",) * 3
        assert gemm_formats(module.qfactory, "decoder.layers.0.mlp.experts.linear_fc1", "grouped_linear") == (
            ("bf16",) * 3
        )
    formats = applied_by_format(decision)["te-recipe"]
    assert not formats["exact"] and "taking 3 expert(s) along" in formats["approximation"]
