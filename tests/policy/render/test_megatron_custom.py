"""Megatron keeps single GEMMs in BF16 through TE's CustomRecipe when the run's TE has it (>= 2.19): the precision
config's custom matchers name `fp8_policy_recipe.mix_*` factories the script writes beside it. Loaded with the
test-side re-implementations of Megatron's precision-config loader and factory import and of TE's CustomRecipe."""

from __future__ import annotations

import pytest

from bench.te_recipe_loader import gemm_formats, loaded, megatron_factory
from fp8_policy.policy.render import applied_by_format
from tests.policy.render import factory as f
from tests.policy.render.megatron_loader import RecipeConfig
from tests.policy.render.test_megatron import run_script

FC2 = "model.module.decoder.layers.3.mlp.linear_fc2"
FC1 = "model.module.decoder.layers.4.mlp.linear_fc1"


def decision(te_version: str, outer: str = "mxfp8"):
    layers = f.family_layers("megatron", 6)
    overrides = [f.override(FC2, "wgrad"), f.override(FC1, "dgrad", "wgrad")]
    return f.decision(layers, (), overrides, f.recipe(outer), te_version)


@pytest.mark.parametrize("outer", ["mxfp8", "nvfp4", "current"])
def test_gemm_overrides_stay_single_gemms_through_custom_factories(outer, tmp_path) -> None:
    text, args, path = run_script(decision("2.20.2", outer), tmp_path)
    assert path is not None and (tmp_path / "fp8_policy_recipe.py").exists()
    assert "--first-last-layers-bf16" not in args
    config = RecipeConfig.from_yaml_file(path)
    low = "current" if outer == "current" else outer
    with loaded((tmp_path / "fp8_policy_recipe.py").read_text(), tmp_path):
        for module, mix in (
            ("decoder.layers.2.mlp.linear_fc2", (low, low, "bf16")),
            ("decoder.layers.3.mlp.linear_fc1", (low, "bf16", "bf16")),
        ):
            recipe = config.match(module)
            assert recipe is not None and recipe.custom_recipe_factory is not None, module
            assert (recipe.fp4_quantization_recipe or recipe.fp8_quantization_recipe) == "custom"
            assert recipe.override_nonquantized_autocast is True
            assert gemm_formats(megatron_factory(recipe.custom_recipe_factory), "") == mix, module
        assert config.match("decoder.layers.0.mlp.linear_fc1") is None
    formats = applied_by_format(decision("2.20.2", outer))["megatron"]
    assert {g["layer"]: g["gemms"] for g in formats["bf16_gemms"]} == {FC2: ["wgrad"], FC1: ["dgrad", "wgrad"]}
    assert FC2 not in formats["bf16_layers"]


def test_an_older_te_keeps_overridden_modules_wholly_in_bf16(tmp_path) -> None:
    text, _args, path = run_script(decision("2.13"), tmp_path)
    assert not (tmp_path / "fp8_policy_recipe.py").exists() and "custom" not in path.read_text()
    assert RecipeConfig.from_yaml_file(path).match("decoder.layers.2.mlp.linear_fc2").precision == "bf16"
    assert "te-recipe format" in text
    assert FC2 in applied_by_format(decision("2.13"))["megatron"]["bf16_layers"]


def test_the_json_megatron_section_tells_the_same_story(tmp_path) -> None:
    """An end-to-end run: a wgrad-only failure in a middle block becomes a GEMM override; with TE 2.20 the JSON's
    megatron section and the script both keep only that GEMM in BF16 through the precision config."""
    from bench.eval_ingest import parse_tree
    from fp8_policy.policy.recommend import RecommendOptions, recommend
    from fp8_policy.policy.synthetic import Rule, Scenario, SyntheticRun, level, named, write_run

    bad = "model.module.decoder.layers.3.mlp.linear_fc2"
    run = SyntheticRun(
        family="megatron",
        num_layers=6,
        profile=Scenario(rules=(Rule(named(bad), level(3.0), "gradient", "underflows%"),)),
    )
    write_run(run, tmp_path / "logs")
    data = parse_tree(tmp_path / "logs")
    data.metadata.update({"recipe": "Float8CurrentScaling", "gpu": "H100", "te_version": "2.20.2"})
    rec = recommend(data, options=RecommendOptions.from_metadata(data.metadata))
    assert [o.layer for o in rec.decision.gemm_overrides] == [bad]
    section = rec.megatron
    assert "--te-precision-config-file" in section["extra_args"] and not section["first_last_layers_bf16"]
    assert any("keep only those GEMMs in BF16" in note for note in section["notes"])
    _text, args, path = run_script(rec.decision, tmp_path)
    assert args[args.index("--te-precision-config-file") + 1] == section["extra_args"][-1]
    assert RecipeConfig.from_yaml_file(path).match("decoder.layers.2.mlp.linear_fc2").custom_recipe_factory
