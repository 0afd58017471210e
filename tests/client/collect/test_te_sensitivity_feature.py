"""The TE debug feature `LogQuantizationSensitivity` on CPU: its YAML through nvdlfw_inspect's real ConfigManager, its
key checks, schedule and math (the same lines as the CPU collector). TE itself cannot run here: the feature file
(client/collect/te_features/) is checked for what it imports and registers, not run."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from bench.te_config_manager import TE_FEATURES, TeConfigManager
from fp8_policy.client.collect.sensitivity import FEATURE, gemm_errors, stat_name
from fp8_policy.client.collect.te_sensitivity import TE_FEATURE_DIR, SensitivityFeatureCore, parse_config

YAML = """
log_sensitivity:
  enabled: True
  layers:
    layer_name_regex_pattern: .*linear_(qkv|fc1)
  transformer_engine:
    LogQuantizationSensitivity:
      enabled: True
      formats: [nvfp4, mxfp8]
      freq: 10
      start_step: 20
"""


def test_the_yaml_loads_in_nvdlfw_inspects_config_manager_and_parses_per_tensor(tmp_path: Path) -> None:
    with TeConfigManager(tmp_path, (*TE_FEATURES, FEATURE)) as te:
        manager = te.load(YAML)
        config = manager.get_config_for_layer("model.decoder.layers.3.self_attention.linear_qkv")
        assert manager.get_config_for_layer("model.decoder.layers.3.mlp.linear_fc2") == {}
    section = config["transformer_engine"][FEATURE]
    parsed = parse_config(section, "gradient")
    assert parsed == {"formats": ["nvfp4", "mxfp8"], "freq": 10, "start_step": 20, "tensor": "gradient"}
    assert parse_config(section, "output") is None  # TE calls it for GEMM outputs too: not read
    core = SensitivityFeatureCore(log_scalar=lambda *a: None)
    assert [it for it in range(0, 50) if core.enabled(section, it)] == [20, 30, 40]


def test_without_the_feature_registered_the_config_manager_refuses_it(tmp_path: Path) -> None:
    with TeConfigManager(tmp_path) as te, pytest.raises(AssertionError, match=FEATURE):
        te.load(YAML)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"enabled": True, "formats": ["fp16"]}, "formats must be"),
        ({"enabled": True, "formats": []}, "formats must be"),
        ({"enabled": True, "gemms": ["fprop"]}, "unknown keys"),
        ({"enabled": True, "freq": 0}, "freq must be >= 1"),
    ],
)
def test_bad_keys_raise_as_te_features_do(section: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_config(section, "activation")


def test_fed_tensors_give_the_collectors_numbers_and_one_line_per_gemm_and_format() -> None:
    generator = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 16, 32, generator=generator), torch.randn(48, 32, generator=generator)
    g = torch.randn(2, 16, 48, generator=generator) / 32
    logged: list[tuple[str, float, int]] = []
    core = SensitivityFeatureCore(log_scalar=lambda name, value, it: logged.append((name, value, it)))
    config = {"formats": ["mxfp8", "current"], "freq": 1}
    for name, tensor in (("activation", x), ("weight", w), ("gradient", g)):
        core.feed(config, "model.fc1", name, 5, tensor)
    assert logged == []  # written when the next step starts
    core.feed(config, "model.fc1", "activation", 6, x)
    expected = {
        stat_name("model.fc1", gemm, fmt): value
        for fmt in ("mxfp8", "current")
        for gemm, value in gemm_errors(x.reshape(-1, 32), w, g.reshape(-1, 48), fmt).values().items()
    }
    assert {name: value for name, value, _ in logged} == pytest.approx(expected)
    assert {it for *_, it in logged} == {5} and len(logged) == 6
    assert core.flush() == []  # iteration 6 saw no gradient: nothing to write


def test_the_feature_dir_holds_one_feature_file_that_registers_one_te_feature() -> None:
    assert sorted(p.name for p in Path(TE_FEATURE_DIR).iterdir() if p.suffix == ".py") == [
        "log_quantization_sensitivity.py"
    ]
    source = (Path(TE_FEATURE_DIR) / "log_quantization_sensitivity.py").read_text()
    tree = ast.parse(source)
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    assert [c.name for c in classes] == [FEATURE]
    decorators = [ast.unparse(d) for d in classes[0].decorator_list]
    assert decorators == ["Registry.register_feature(namespace='transformer_engine')"]
    modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert {m for m in modules if m and m.startswith("fp8_policy")} <= {
        "fp8_policy.client.collect.sensitivity",
        "fp8_policy.client.collect.te_sensitivity",
    }
    assert "transformer_engine.debug.features.api" in modules
    methods = {f.name for f in classes[0].body if isinstance(f, ast.FunctionDef)}
    assert {"parse_config_and_api", "inspect_tensor_enabled", "inspect_tensor"} <= methods
