"""write_te_debug_config, validated with nvdlfw_inspect 0.2.2's real ConfigManager (see conftest.nvdlfw_config)."""

from __future__ import annotations

import re

import pytest
import yaml

from fp8_policy.client.apply import te_debug_config, write_te_debug_config

POLICY = {
    "fp8_skip_layers": ["model.module.decoder.layers.1.self_attention.layernorm_qkv", "model.module.lm_head"],
    "gemm_overrides": [
        {"layer": "model.module.decoder.layers.3.layernorm_mlp.fc2", "gemms": ["wgrad"], "reason": "a"},
        {"layer": "model.module.decoder.layers.3.layernorm_mlp.fc2", "gemms": ["dgrad"], "reason": "b"},
        {"layer": "model.module.decoder.layers.4.self_attention.proj", "gemms": ["wgrad", "dgrad"], "reason": "c"},
        {"layer": "model.module.decoder.layers.5.layernorm_mlp.fc1", "gemms": ["fprop"], "reason": "d"},
        {"layer": "model.module.lm_head", "gemms": ["wgrad"], "reason": "skipped anyway"},
    ],
    "recipe": {
        "name": "current",
        "class": "transformer_engine.common.recipe.Float8CurrentScaling",
        "kwargs": {"fp8_format": "HYBRID"},
    },
    "policy_version": "2026.11.1",
}
DECODER = "model.module.decoder.layers"
EXPECTED = {
    f"{DECODER}.1.self_attention.layernorm_qkv": {"DisableFP8Layer": {"enabled": True}},
    "model.module.lm_head": {"DisableFP8Layer": {"enabled": True}},
    f"{DECODER}.3.layernorm_mlp.fc2": {"DisableFP8GEMM": {"enabled": True, "gemms": ["dgrad", "wgrad"]}},
    f"{DECODER}.4.self_attention.proj": {"DisableFP8GEMM": {"enabled": True, "gemms": ["dgrad", "wgrad"]}},
    f"{DECODER}.5.layernorm_mlp.fc1": {"DisableFP8GEMM": {"enabled": True, "gemms": ["fprop"]}},
}
NOT_MATCHED = [
    f"{DECODER}.10.self_attention.layernorm_qkv",  # layers.10 must not match layers.1
    f"{DECODER}.11.self_attention.layernorm_qkv",
    f"{DECODER}.1.self_attention.layernorm_qkvX",
    f"{DECODER}.1.self_attention.proj",
    f"{DECODER}.3.layernorm_mlp.fc1",
    f"{DECODER}.13.layernorm_mlp.fc2",
    "model.module.lm_head_extra",
    "xmodel.module.lm_head",
    "model.lm_head",  # the config matches logged names exactly
]


def test_every_layer_gets_exactly_its_features(tmp_path, nvdlfw_config) -> None:
    path = write_te_debug_config(POLICY, tmp_path / "cfg" / "fp8_debug.yaml")
    manager = nvdlfw_config(str(path))
    for layer, features in EXPECTED.items():
        assert manager.get_config_for_layer(layer) == {"transformer_engine": features}, layer
    for layer in NOT_MATCHED:
        assert manager.get_config_for_layer(layer) == {}, layer


def test_sections_are_anchored_escaped_and_never_exact_names(tmp_path) -> None:
    text = te_debug_config(POLICY)
    config = yaml.safe_load(text)
    assert "exact_layer_names" not in text and text.startswith("# TE debug-API config")
    assert list(config) == [
        "fp8_policy_disabled_layers",
        "fp8_policy_high_precision_dgrad_wgrad",
        "fp8_policy_high_precision_fprop",
    ]  # one per distinct GEMM set
    for section in config.values():
        pattern = section["layers"]["layer_name_regex_pattern"]
        assert pattern.startswith("^(") and pattern.endswith(")$") and r"\." in pattern
        re.compile(pattern)


def test_quantization_feature_names_for_new_te(tmp_path, nvdlfw_config) -> None:
    path = write_te_debug_config(POLICY, tmp_path / "q.yaml", features="quantization")
    manager = nvdlfw_config(str(path))
    assert manager.get_config_for_layer("model.module.lm_head") == {
        "transformer_engine": {"DisableQuantizationLayer": {"enabled": True}}
    }


def test_rendered_te_yaml_in_the_policy_is_used_verbatim(tmp_path) -> None:
    rendered = "fp8_disabled_layers:\n  enabled: True\n  layers:\n    layer_name_regex_pattern: '^(model\\.x)$'\n"
    path = write_te_debug_config({**POLICY, "te_yaml": rendered}, tmp_path / "r.yaml")
    assert path.read_text() == rendered


def test_empty_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="no TE debug config is needed"):
        te_debug_config({"fp8_skip_layers": [], "gemm_overrides": []})


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"fp8_skip_layers": "model.lm_head"}, "fp8_skip_layers must be a list of strings"),
        ({"fp8_skip_layers": [], "gemm_overrides": [{"layer": "a", "gemms": ["bprop"]}]}, "subset of"),
        ({"fp8_skip_layers": ["a"]}, None),
    ],
)
def test_policy_validation(policy, message) -> None:
    if message is None:
        assert "^(a)$" in te_debug_config(policy)
    else:
        with pytest.raises(ValueError, match=message):
            te_debug_config(policy)
