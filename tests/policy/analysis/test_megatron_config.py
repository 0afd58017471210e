"""A Megatron precision config (`--te-precision-config-file`) given as run metadata states each layer's recipe, read
as Megatron-LM's loader reads it (megatron/core/quantization/quant_config.py: ordered glob matchers over
`named_modules()` paths, off unless enabled, the first match wins; TEQuantizationParams payloads)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fp8_policy.policy.analysis import analyze
from fp8_policy.policy.analysis.format_bands import SeriesBands, Stated
from fp8_policy.policy.analysis.megatron_config import module_path, parse_precision_config
from fp8_policy.policy.records import MetricName
from fp8_policy.policy.thresholds import Thresholds
from tests.policy.te_logs import LoggedLayer, noisy, parse, write_tree

CONFIG = """
configs:
  bf16:
    transformer_engine_config_type: TEQuantizationParams
    training_recipe: {}
  fp8_block:
    transformer_engine_config_type: TEQuantizationParams
    training_recipe:
      fp8_quantization_recipe: blockwise
  fp4:
    transformer_engine_config_type: TEQuantizationParams
    training_recipe:
      fp4_quantization_recipe: nvfp4
matchers:
  last_block_bf16:
    type: glob
    pattern: "decoder.layers.7.*"
    config: bf16
    enabled: true
  off:
    type: glob
    pattern: "*"
    config: fp4
  late_blocks:
    type: glob
    pattern: "decoder.layers.[4-7].*"
    config: fp8_block
    enabled: true
"""
SUBS = ("self_attention.linear_qkv", "mlp.linear_fc1")
N = 30


def name(block: int, sub: str) -> str:
    return f"model.module.decoder.layers.{block}.{sub}"


def test_the_config_reads_as_megatron_reads_it() -> None:
    assert parse_precision_config(CONFIG) == [("decoder.layers.7.*", "bf16"), ("decoder.layers.[4-7].*", "block")]
    assert (
        module_path(name(8, "mlp.experts.linear_fc1.gemm_3"), one_based=True)
        == "decoder.layers.7.mlp.experts.linear_fc1"
    )
    assert module_path(name(0, SUBS[0]), one_based=False) == "decoder.layers.0.self_attention.linear_qkv"


def _match_all(training_recipe: dict[str, str]) -> dict[str, object]:
    """A precision config whose one TE config (`training_recipe`) every module matches."""
    return {
        "configs": {
            "x": {"transformer_engine_config_type": "TEQuantizationParams", "training_recipe": training_recipe}
        },
        "matchers": {"a": {"type": "glob", "pattern": "*", "config": "x", "enabled": True}},
    }


@pytest.mark.parametrize(
    "config, detail",
    [
        ("configs: [", "is not valid YAML"),
        ({"matchers": {"a": {"type": "regex", "pattern": "*", "config": "x", "enabled": True}}}, "type must be 'glob'"),
        ({"configs": {"x": {"training_recipe": {}}}, "matchers": {}}, None),  # no enabled matcher: nothing read
        (_match_all({"fp8_quantization_recipe": "delayed"}), "delayed scaling is not allowed"),
        (_match_all({"fp8_recipe": "mxfp8"}), "field(s) fp8_recipe not valid"),
        ("- a list", "must be the precision config's YAML text or a mapping"),
    ],
)
def test_a_config_megatron_would_refuse_is_refused(config: object, detail: str | None) -> None:
    if detail is None:
        assert parse_precision_config(config) == []
        return
    with pytest.raises(ValueError, match=detail.replace("(", r"\(").replace(")", r"\)")):
        parse_precision_config(config)


def test_the_analysis_reads_each_layers_recipe_from_the_config(tmp_path: Path) -> None:
    """An NVFP4 run logged with TE's 1-based layer numbers (blocks 1-8): blocks 5-8 log plain names with linear
    scales, which alone read as per-tensor current scaling (an assumption); the config says blocks 5-7 trained in
    block scaling (0-based matchers 4-7, block 8 = Megatron's 7 taken by the earlier BF16 matcher, so not stated)."""
    rng = np.random.default_rng(5)
    layers = []
    for block in range(1, 9):
        for sub in SUBS:
            if block <= 4:
                series = {(t, "nvfp4_underflows%"): noisy(7.0, N, rng) for t in ("activation", "gradient")}
            else:
                series = {(t, "underflows%"): noisy(0.05, N, rng) for t in ("activation", "gradient", "weight")}
                series[("activation", "scale_inv_min")] = noisy(0.0123, N, rng)
            layers.append(LoggedLayer(name(block, sub), series))
    write_tree(tmp_path, layers, np.arange(N) * 10)
    metadata = {"recipe": "NVFP4BlockScaling", "te_version": "2.20.2"}
    without = analyze(parse(tmp_path, metadata)).training.layer_recipes
    assert {without[name(b, s)] for b in range(5, 9) for s in SUBS} == {"current"}
    stated = analyze(parse(tmp_path, {**metadata, "megatron_precision_config": CONFIG}))
    own = stated.training.layer_recipes
    assert {own[name(b, s)] for b in range(5, 8) for s in SUBS} == {"block"}
    assert {own[name(8, s)] for s in SUBS} == {"current"}  # the BF16 matcher comes first for Megatron's block 7
    assert any("Megatron precision config's matcher 'decoder.layers.[4-7].*'" in n for n in stated.notes)


def test_live_and_heatmap_bands_follow_the_config() -> None:
    """A bare underflows% of a module the config runs in NVFP4 is judged with NVFP4's bands (live, heatmap)."""
    config = {
        "configs": {
            "fp4": {
                "transformer_engine_config_type": "TEQuantizationParams",
                "training_recipe": {"fp4_quantization_recipe": "nvfp4"},
            }
        },
        "matchers": {"fc1": {"type": "glob", "pattern": "*linear_fc1", "config": "fp4", "enabled": True}},
    }
    names = [name(b, s) for b in range(4) for s in SUBS]
    bands = SeriesBands.from_metadata(Thresholds(), {"megatron_precision_config": config}, names)
    fc1 = MetricName(name(2, "mlp.linear_fc1"), "gradient", "underflows%")
    qkv = MetricName(name(2, SUBS[0]), "gradient", "underflows%")
    assert bands.of(fc1).critical == 13.0 and bands.of(qkv).critical == 2.0
    assert Stated.from_metadata({"megatron_precision_config": "configs: ["}).recipe(fc1.layer) is None


def test_under_pipeline_parallelism_the_matchers_see_each_stages_local_paths() -> None:
    """PP2 over 8 blocks: stage 1 builds global blocks 4-7 as its ModuleList 0-3 (Megatron `_build_layers`), and its
    precision-config matchers see those local paths. `decoder.layers.3.*` therefore hits global blocks 3 and 7 (the
    last block of each stage), `decoder.layers.[4-7].*` hits none. Logged names (TE's layer_number) are global."""
    config = """
configs:
  fp8_block:
    transformer_engine_config_type: TEQuantizationParams
    training_recipe:
      fp8_quantization_recipe: blockwise
matchers:
  last_of_each_stage:
    type: glob
    pattern: "decoder.layers.3.*"
    config: fp8_block
    enabled: true
  never_local:
    type: glob
    pattern: "decoder.layers.[4-7].*"
    config: fp8_block
    enabled: true
"""
    logged = [name(block, "mlp.linear_fc1") for block in range(1, 9)]  # layer_number: global, 1-based
    staged = {"megatron_precision_config": config, "pipeline_model_parallel_size": 2, "num_layers": 8}
    stated = Stated.from_metadata(staged, logged)
    hit = [layer for layer in logged if stated.recipe(layer) is not None]
    assert hit == [name(4, "mlp.linear_fc1"), name(8, "mlp.linear_fc1")]  # global 0-based blocks 3 and 7
    assert "decoder.layers.3.mlp.linear_fc1" in stated.recipe(name(8, "mlp.linear_fc1"))[1]  # type: ignore[index]
    flat = Stated.from_metadata({"megatron_precision_config": config, "num_layers": 8}, logged)
    assert [layer for layer in logged if flat.recipe(layer) is not None] == logged[3:]  # no PP: global = local
