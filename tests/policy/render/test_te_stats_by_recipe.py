"""TE debug YAMLs (te-yaml and te-monitor) for every TE 2.20 recipe: loaded by nvdlfw_inspect's real ConfigManager,
and no layer watched with a stat TE rejects for the recipe it runs at (tests/policy/render/te_stats_rules.py)."""

from __future__ import annotations

import itertools

import pytest
import yaml

from fp8_policy.policy.records import Precision
from fp8_policy.policy.render import RenderOptions, render
from fp8_policy.policy.render.precision import precision_of
from tests.policy.render import factory as f
from tests.policy.render.te_stats_rules import config_errors

RECIPES = ("delayed", "current", "block", "mxfp8", "nvfp4")
DISABLE = ("DisableFP8Layer", "DisableFP8GEMM", "DisableQuantizationLayer", "DisableQuantizationGEMM")


def te_features(manager, name: str) -> dict:
    return dict(manager.get_config_for_layer(name).get("transformer_engine", {}))


def frontier_decision(recipe: str, fp8_param: bool, ladder: bool):
    """A Llama-like model: block 1 skipped, a GEMM override, a head that ran in BF16, and optionally a ladder."""
    layers = f.family_layers("llama", 4, head_precision=Precision.HIGH)
    fc2_3 = "model.model.layers.3.layernorm_mlp.fc2"
    skip = (
        (*f.block_names("llama", 1), "model.model.layers.2.layernorm_mlp.fc1") if ladder else f.block_names("llama", 1)
    )
    decision = f.decision(layers, skip, [f.override(fc2_3, "wgrad")], f.recipe(recipe), "2.20.2")
    rungs = {}
    if ladder:
        rungs = {
            "model.model.layers.2.self_attention.layernorm_qkv": "nvfp4",
            "model.model.layers.2.self_attention.proj": "mxfp8",
            "model.model.layers.2.layernorm_mlp.fc1": "bf16",  # skipped by the plan too (as the analysis does)
            "model.model.layers.4.layernorm_mlp.fc1": "current",
            "model.model.layers.4.layernorm_mlp.fc2": "delayed",
            "model.model.layers.4.self_attention.proj": "bf16",  # not in the plan: stated, not applied
        }
    return f.with_ladder(decision, rungs, fp8_param=fp8_param)


CASES = list(itertools.product(RECIPES, (False, True), (False, True)))


@pytest.mark.parametrize(("recipe", "fp8_param", "ladder"), CASES)
def test_te_monitor_is_accepted_and_never_crashes_te(nvdlfw_config, recipe, fp8_param, ladder):
    decision = frontier_decision(recipe, fp8_param, ladder)
    manager = nvdlfw_config(render(decision, "te-monitor").content)
    runs_at = precision_of(decision)
    for name, rung in runs_at.items():
        got = te_features(manager, name)
        assert not set(got) & set(DISABLE), name
        assert config_errors(got, rung, fp8_param) == [], (name, rung, got)
        if rung == "bf16":
            assert set(got) == {"LogTensorStats"}, name
        else:
            assert set(got) == {"LogNvfp4TensorStats" if rung == "nvfp4" else "LogFp8TensorStats"}, (name, rung)
    # a TE layer that was never logged runs at the outer recipe and is watched for it
    unseen = te_features(manager, "model.model.layers.9.layernorm_mlp.fc1")
    assert config_errors(unseen, recipe, fp8_param) == [] and unseen


@pytest.mark.parametrize(("recipe", "fp8_param", "ladder"), CASES)
def test_te_yaml_watches_only_with_stats_te_accepts(nvdlfw_config, recipe, fp8_param, ladder):
    decision = frontier_decision(recipe, fp8_param, ladder)
    text = render(decision, "te-yaml").content
    manager = nvdlfw_config(text)
    for layer in decision.layers:
        got = te_features(manager, layer.name)
        disabled = {"DisableQuantizationLayer", "DisableQuantizationGEMM"} & set(got)
        if "DisableQuantizationLayer" in disabled or layer.precision is Precision.HIGH:
            runs_at = "bf16"
        else:
            runs_at = recipe  # the debug API applies no ladder rung other than BF16
        assert config_errors(got, runs_at, fp8_param) == [], (layer.name, got)
    if ladder:
        # the plan's BF16 is disabled whole; a bf16 rung outside the plan and the other rungs are stated
        assert "DisableQuantizationLayer" in te_features(manager, "model.model.layers.2.layernorm_mlp.fc1")
        assert not {"DisableQuantizationLayer"} & set(te_features(manager, "model.model.layers.4.self_attention.proj"))
        assert "NOT applied here" in text and "NOT applied: the precision ladder finds no low-precision rung" in text


def test_nvfp4_runs_log_nvfp4_stats_with_the_config_names_te_takes():
    decision = frontier_decision("nvfp4", False, False)
    parsed = yaml.safe_load(render(decision, "te-yaml").content)
    feature = parsed["fp8_stats_remaining_layers"]["transformer_engine"]
    assert list(feature) == ["LogNvfp4TensorStats"]
    assert {tuple(s["stats"]) for s in feature["LogNvfp4TensorStats"]["tensors_struct"]} == {("underflows%", "mse")}


@pytest.mark.parametrize("recipe", ["current", "block", "mxfp8"])
def test_overflows_only_under_delayed_scaling(recipe):
    text = render(frontier_decision(recipe, False, False), "te-yaml").content
    assert "overflows%" not in text.split("\n\n", 1)[1]
    assert "overflows%" in render(frontier_decision("delayed", False, False), "te-yaml").content


@pytest.mark.parametrize("recipe", ["delayed", "current", "nvfp4"])
def test_fp8_parameters_drop_weight_stats_that_need_a_high_precision_weight(recipe):
    section = yaml.safe_load(render(frontier_decision(recipe, True, False), "te-yaml").content)
    feature = next(iter(section["fp8_stats_remaining_layers"]["transformer_engine"].values()))
    weight = [s for s in feature["tensors_struct"] if s["tensor"] == "weight"]
    if recipe == "nvfp4":
        assert weight == []
    else:
        assert weight[0]["stats"] == ["scale_inv_min", "scale_inv_max"]


def test_the_rules_catch_what_the_old_renderer_wrote():
    """The stats the renderer wrote before TE 2.20 support: rejected for NVFP4 and, with overflows%, for current."""
    old = {"LogFp8TensorStats": {"enabled": True, "tensors_struct": [{"tensor": "weight", "stats": ["underflows%"]}]}}
    assert config_errors(old, "nvfp4", False)
    assert config_errors(old, "current", True)
    overflows = {
        "LogFp8TensorStats": {"enabled": True, "tensors_struct": [{"tensor": "gradient", "stats": ["overflows%"]}]}
    }
    assert config_errors(overflows, "mxfp8", False) and not config_errors(overflows, "delayed", False)
    assert config_errors(old, "bf16", False)


def test_stats_frequency_option_reaches_every_section(nvdlfw_config):
    decision = frontier_decision("mxfp8", False, True)
    parsed = yaml.safe_load(render(decision, "te-monitor", RenderOptions(stats_freq=25)).content)
    for body in parsed.values():
        for feature in body["transformer_engine"].values():
            freqs = {s["freq"] for s in feature.get("tensors_struct", [])} | (
                {feature["freq"]} if "freq" in feature else set()
            )
            assert freqs == {25}


def test_a_layer_that_already_ran_in_high_precision_is_kept_there_and_watched_in_high_precision(nvdlfw_config):
    """The ladder gives bionemo's BF16 LM head a `bf16` rung; the YAML keeps it in BF16 explicitly (TE consults the
    disable feature only for a layer that quantizes, so it changes nothing while the model keeps the head in BF16)
    and watches it with LogTensorStats, never LogFp8TensorStats."""
    layers = f.family_layers("esm2", 2, head_precision=Precision.HIGH)
    decision = f.with_ladder(f.decision(layers), {"model.lm_head.dense": "bf16"})
    manager = nvdlfw_config(render(decision, "te-yaml").content)
    assert set(te_features(manager, "model.lm_head.dense")) == {"DisableFP8Layer", "LogTensorStats"}
    megatron = render(decision, "megatron").content
    assert "--te-precision-config-file" not in megatron  # Megatron runs output_layer in BF16: nothing to add
    assert "Head layer(s) ['model.lm_head.dense'] stay BF16 as asked" in megatron


def test_a_bf16_rung_on_a_layer_with_gemm_overrides_keeps_the_exact_gemms(nvdlfw_config):
    """The ladder says `bf16` for a layer the plan overrides per GEMM (real ESM-2 run); te-yaml keeps the GEMMs."""
    layers = f.family_layers("esm2", 2)
    qkv = "model.esm.encoder.layers.2.self_attention.layernorm_qkv"
    decision = f.with_ladder(f.decision(layers, (), [f.override(qkv, "dgrad", "wgrad")]), {qkv: "bf16"})
    got = te_features(nvdlfw_config(render(decision, "te-yaml").content), qkv)
    assert set(got) == {"DisableFP8GEMM", "LogTensorStats"} and got["DisableFP8GEMM"]["gemms"] == ["dgrad", "wgrad"]
    assert set(te_features(nvdlfw_config(render(decision, "te-monitor").content), qkv)) == {"LogTensorStats"}


@pytest.mark.parametrize("family", sorted(f.FAMILIES))
def test_te_monitor_for_every_family_keeps_skips_and_bf16_heads_on_log_tensor_stats(nvdlfw_config, family):
    layers = f.family_layers(family, 3, head_precision=Precision.HIGH)
    first = 0 if family == "hf" else 1
    skip = f.block_names(family, first)
    manager = nvdlfw_config(render(f.decision(layers, skip, recipe_choice=f.recipe("current")), "te-monitor").content)
    for layer in layers:
        got = set(te_features(manager, layer.name))
        kept = layer.name in skip or layer.precision is Precision.HIGH
        assert got == ({"LogTensorStats"} if kept else {"LogFp8TensorStats"}), layer.name


@pytest.mark.parametrize("recipe", ["Float8CurrentScaling", "MXFP8BlockScaling", "NVFP4BlockScaling"])
def test_a_run_without_weight_series_gets_no_weight_stat_te_refuses(nvdlfw_config, recipe, tmp_path):
    """FP8 primary weights without `fp8_param` in the metadata: the run logged activations and gradients only, so the
    monitoring never asks for weight underflows%/mse (TE refuses them without a high-precision weight)."""
    from bench.eval_ingest import parse_tree
    from fp8_policy.policy.recommend import RecommendOptions, recommend
    from fp8_policy.policy.synthetic import SyntheticRun, write_run

    nvfp4 = recipe == "NVFP4BlockScaling"
    stats = ("nvfp4_underflows%", "nvfp4_mse") if nvfp4 else ("underflows%", "scale_inv_min", "scale_inv_max", "mse")
    run = SyntheticRun(family="megatron", num_layers=4, tensors=("activation", "gradient"), stats=stats)
    write_run(run, tmp_path)
    data = parse_tree(tmp_path)
    data.metadata.update({"recipe": recipe, "gpu": "B200", "te_version": "2.20.2"})
    decision = recommend(data, options=RecommendOptions.from_metadata(data.metadata)).decision
    assert decision.weights_logged is False and decision.fp8_param is False
    for fmt in ("te-monitor", "te-yaml"):
        text = render(decision, fmt).content
        assert "logged no weight statistics" in text
        manager = nvdlfw_config(text)
        for name, rung in precision_of(decision).items():
            assert config_errors(te_features(manager, name), rung, fp8_param=True) == [], (fmt, name)
