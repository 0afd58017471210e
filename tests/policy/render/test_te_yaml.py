"""TE debug YAML: every layer of the decision is routed through nvdlfw_inspect's real ConfigManager."""

from __future__ import annotations

import pytest
import yaml

from fp8_policy.policy.records import Precision
from fp8_policy.policy.render import RenderOptions, render
from tests.policy.render import factory as f

FP8_STATS = ["underflows%", "scale_inv_min", "scale_inv_max", "mse"]


def features(manager, name: str) -> dict:
    """Feature name -> config that `name` gets (TE and base namespaces merged)."""
    config = manager.get_config_for_layer(name)
    return {**config.get("transformer_engine", {}), **config.get("base", {})}


def te_yaml(decision, **options) -> str:
    return render(decision, "te-yaml", RenderOptions(**options)).content


def test_megatron_non_contiguous_skip_and_overrides_route_every_layer(nvdlfw_config):
    layers = f.family_layers("megatron", 12)
    skip = f.block_names("megatron", 1, 7) + ("model.module.output_layer",)
    fc2_5 = "model.module.decoder.layers.5.mlp.linear_fc2"
    qkv_9 = "model.module.decoder.layers.9.self_attention.linear_qkv"
    proj_9 = "model.module.decoder.layers.9.self_attention.linear_proj"
    overrides = (f.override(fc2_5, "wgrad"), f.override(qkv_9, "dgrad", "wgrad"), f.override(proj_9, "wgrad"))
    manager = nvdlfw_config(te_yaml(f.decision(layers, skip, overrides)))
    for layer in layers:
        got = features(manager, layer.name)
        if layer.name in skip:
            assert set(got) == {"DisableFP8Layer", "LogTensorStats"}, layer.name
        elif layer.name in (fc2_5, proj_9):
            assert set(got) == {"DisableFP8GEMM", "LogTensorStats"}
            assert got["DisableFP8GEMM"]["gemms"] == ["wgrad"]
        elif layer.name == qkv_9:
            assert got["DisableFP8GEMM"]["gemms"] == ["dgrad", "wgrad"]
        else:
            assert set(got) == {"LogFp8TensorStats"}, layer.name
            assert [s["stats"] for s in got["LogFp8TensorStats"]["tensors_struct"]] == [FP8_STATS] * 3
    # a TE layer that was never logged keeps FP8 and is monitored
    assert set(features(manager, "model.module.decoder.layers.13.mlp.linear_fc1")) == {"LogFp8TensorStats"}


def test_one_section_per_distinct_gemm_set():
    layers = f.family_layers("llama", 4)
    overrides = [f.override(f"model.model.layers.{i}.layernorm_mlp.fc2", "wgrad") for i in (1, 2, 3)]
    overrides.append(f.override("model.model.layers.4.layernorm_mlp.fc2", "dgrad", "wgrad"))
    parsed = yaml.safe_load(te_yaml(f.decision(layers, (), overrides)))
    assert list(parsed) == ["fp8_disabled_gemms_wgrad", "fp8_disabled_gemms_dgrad_wgrad", "fp8_stats_remaining_layers"]


@pytest.mark.parametrize(
    ("te_version", "forced", "layer_feature", "gemm_feature"),
    [
        (None, None, "DisableFP8Layer", "DisableFP8GEMM"),
        ("2.12", None, "DisableFP8Layer", "DisableFP8GEMM"),
        ("2.13", None, "DisableQuantizationLayer", "DisableQuantizationGEMM"),
        ("2.20.2+abc", None, "DisableQuantizationLayer", "DisableQuantizationGEMM"),
        ("2.20", "fp8", "DisableFP8Layer", "DisableFP8GEMM"),
        ("2.8", "quantization", "DisableQuantizationLayer", "DisableQuantizationGEMM"),
    ],
)
def test_te_version_selects_disable_feature(nvdlfw_config, te_version, forced, layer_feature, gemm_feature):
    layers = f.family_layers("esm2", 3)
    skip = f.block_names("esm2", 1)
    fc2 = "model.esm.encoder.layers.2.layernorm_mlp.fc2"
    decision = f.decision(layers, skip, [f.override(fc2, "wgrad")], te_version=te_version)
    manager = nvdlfw_config(te_yaml(decision, disable_features=forced))
    assert set(features(manager, skip[0])) == {layer_feature, "LogTensorStats"}
    assert features(manager, fc2)[gemm_feature] == {"enabled": True, "gemms": ["wgrad"]}


def test_invalid_disable_option_is_rejected():
    with pytest.raises(ValueError):
        te_yaml(f.decision(f.family_layers("esm2", 2)), disable_features="bf16")


def test_empty_policy_emits_only_the_monitoring_section(nvdlfw_config):
    layers = f.family_layers("esm2", 6)
    text = te_yaml(f.decision(layers))
    assert list(yaml.safe_load(text)) == ["fp8_stats_remaining_layers"]
    manager = nvdlfw_config(text)
    assert all(set(features(manager, layer.name)) == {"LogFp8TensorStats"} for layer in layers)


def test_near_miss_numbers_stay_in_fp8(nvdlfw_config):
    layers = f.family_layers("esm2", 12)
    skip = f.block_names("esm2", 1)
    manager = nvdlfw_config(te_yaml(f.decision(layers, skip)))
    for name in f.block_names("esm2", 10, 11, 12):
        assert set(features(manager, name)) == {"LogFp8TensorStats"}, name
    for name in skip:
        assert "DisableFP8Layer" in features(manager, name)


def test_metacharacter_names_match_exactly(nvdlfw_config):
    names = ["model.blocks.1.attn+proj[0]", "model.blocks.10.attn+proj[0]", "model.blocks.1.mlp(fc)"]
    layers = [f.body(name, int(name.split(".")[2])) for name in names]
    skip = ["model.blocks.1.attn+proj[0]", "model.blocks.1.mlp(fc)"]
    manager = nvdlfw_config(te_yaml(f.decision(layers, skip)))
    for name in skip:
        assert "DisableFP8Layer" in features(manager, name)
    near_misses = [
        "model.blocks.10.attn+proj[0]",
        "model.blocks.1.attnnproj0",
        "model_blocks.1.attn+proj[0]",
        "model.blocks.1.attn+proj[0].x",
        "x.model.blocks.1.attn+proj[0]",
        "model.blocks.1.mlpfc",
    ]
    for name in near_misses:
        assert set(features(manager, name)) == {"LogFp8TensorStats"}, name


def test_regexes_are_single_quoted_and_never_exact_layer_names():
    layers = f.family_layers("megatron", 4)
    text = te_yaml(f.decision(layers, f.block_names("megatron", 2)))
    assert "exact_layer_names" not in text
    regex_lines = [line for line in text.splitlines() if "layer_name_regex_pattern" in line]
    assert len(regex_lines) == 2
    assert all(line.split(": ", 1)[1].startswith("'") for line in regex_lines)
    parsed = yaml.safe_load(text)
    pattern = parsed["fp8_disabled_layers"]["layers"]["layer_name_regex_pattern"]
    assert pattern.startswith("^(") and pattern.endswith(")$")


@pytest.mark.parametrize(
    ("recipe_name", "te_version", "expected"),
    [
        ("delayed", None, ["underflows%", "overflows%", "scale_inv_min", "scale_inv_max", "mse"]),
        ("current", "2.13", FP8_STATS),
        ("mxfp8", None, FP8_STATS),
        ("delayed", "2.6", ["underflows%"]),
    ],
)
def test_fp8_stats_follow_recipe_and_te_version(recipe_name, te_version, expected):
    decision = f.decision(f.family_layers("llama", 2), recipe_choice=f.recipe(recipe_name), te_version=te_version)
    section = yaml.safe_load(te_yaml(decision))["fp8_stats_remaining_layers"]
    structs = section["transformer_engine"]["LogFp8TensorStats"]["tensors_struct"]
    assert [s["tensor"] for s in structs] == ["activation", "gradient", "weight"]
    assert all(s["stats"] == expected and s["freq"] == 10 for s in structs)


def test_skip_wins_over_override_for_the_same_layer(nvdlfw_config):
    layers = f.family_layers("llama", 3)
    fc2 = "model.model.layers.2.layernorm_mlp.fc2"
    manager = nvdlfw_config(te_yaml(f.decision(layers, [fc2], [f.override(fc2, "wgrad")])))
    assert set(features(manager, fc2)) == {"DisableFP8Layer", "LogTensorStats"}


def test_monitoring_of_disabled_layers_can_be_turned_off(nvdlfw_config):
    layers = f.family_layers("llama", 3)
    fc2 = "model.model.layers.2.layernorm_mlp.fc2"
    decision = f.decision(layers, f.block_names("llama", 1), [f.override(fc2, "wgrad")])
    manager = nvdlfw_config(te_yaml(decision, monitor_disabled=False, stats_freq=50))
    assert set(features(manager, "model.model.layers.1.layernorm_mlp.fc1")) == {"DisableFP8Layer"}
    assert set(features(manager, fc2)) == {"DisableFP8GEMM"}
    stats = features(manager, "model.model.layers.3.layernorm_mlp.fc1")["LogFp8TensorStats"]
    assert {s["freq"] for s in stats["tensors_struct"]} == {50}


def test_layers_already_in_high_precision_get_high_precision_stats(nvdlfw_config):
    layers = f.family_layers("esm2", 3, head_precision=Precision.HIGH)
    text = te_yaml(f.decision(layers, f.block_names("esm2", 3)))
    manager = nvdlfw_config(text)
    assert set(features(manager, "model.lm_head.dense")) == {"DisableFP8Layer", "LogTensorStats"}
    assert "1 layer(s) already ran in high precision" in text


def test_skipped_head_and_header_lists_layers(nvdlfw_config):
    layers = f.family_layers("llama", 4)
    text = te_yaml(f.decision(layers, ["model.lm_head"], te_version="2.13"))
    assert "#   model.lm_head" in text and "DisableQuantizationLayer" in text.splitlines()[3]
    manager = nvdlfw_config(text)
    assert set(features(manager, "model.lm_head")) == {"DisableQuantizationLayer", "LogTensorStats"}
    assert set(features(manager, "model.model.layers.4.layernorm_mlp.fc2")) == {"LogFp8TensorStats"}


def test_unknown_feature_name_fails_to_load(nvdlfw_config):
    text = te_yaml(f.decision(f.family_layers("esm2", 2), f.block_names("esm2", 1)))
    with pytest.raises(AssertionError, match="Could not find feature 'DisableFP8Layr'"):
        nvdlfw_config(text.replace("DisableFP8Layer", "DisableFP8Layr"))


def test_overlapping_sections_are_detected_by_the_checker(nvdlfw_config):
    text = te_yaml(f.decision(f.family_layers("esm2", 2), f.block_names("esm2", 1)))
    parsed = yaml.safe_load(text)
    parsed["fp8_stats_remaining_layers"]["layers"]["layer_name_regex_pattern"] = ".*"  # drop the lookahead
    manager = nvdlfw_config(yaml.safe_dump(parsed))
    with pytest.raises(ValueError, match="multiple debug configs"):
        manager.get_config_for_layer("model.esm.encoder.layers.1.layernorm_mlp.fc1")
