"""Build PolicyDecision / LayerInfo records for the renderer tests (realistic names of several families)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from fp8_policy.policy.records import (
    RECIPE_CLASSES,
    GemmOverride,
    LayerGroup,
    LayerInfo,
    LayerPrecision,
    LayerStructure,
    PolicyDecision,
    Precision,
    RecipeChoice,
)

# family -> (block prefix, sublayer paths, head names); ESM2/Llama/Megatron use TE's 1-based layer_number.
FAMILIES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "esm2": (
        "model.esm.encoder.layers",
        ("self_attention.layernorm_qkv", "self_attention.proj", "layernorm_mlp.fc1", "layernorm_mlp.fc2"),
        ("model.lm_head.dense",),
    ),
    "llama": (
        "model.model.layers",
        ("self_attention.layernorm_qkv", "self_attention.proj", "layernorm_mlp.fc1", "layernorm_mlp.fc2"),
        ("model.lm_head",),
    ),
    "megatron": (
        "model.module.decoder.layers",
        ("self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2"),
        ("model.module.output_layer",),
    ),
    # plain torch model without layer_number: nvdlfw uses the 0-based list index
    "hf": (
        "model.model.layers",
        ("self_attn.q_proj", "self_attn.o_proj", "mlp.up_proj", "mlp.down_proj"),
        ("model.lm_head",),
    ),
}
SUBLAYER = {
    "layernorm_qkv": "qkv",
    "linear_qkv": "qkv",
    "q_proj": "qkv",
    "proj": "proj",
    "linear_proj": "proj",
    "o_proj": "proj",
    "fc1": "fc1",
    "linear_fc1": "fc1",
    "up_proj": "fc1",
    "fc2": "fc2",
    "linear_fc2": "fc2",
    "down_proj": "fc2",
}


def body(name: str, index: int, precision: Precision = Precision.FP8) -> LayerInfo:
    sublayer = SUBLAYER.get(name.rsplit(".", 1)[-1], name.rsplit(".", 1)[-1])
    return LayerInfo(name, LayerStructure(LayerGroup.BODY, index, sublayer), precision, True)


def head(name: str, precision: Precision = Precision.FP8) -> LayerInfo:
    return LayerInfo(name, LayerStructure(LayerGroup.HEAD, None, "lm_head"), precision, True)


def family_layers(family: str, n_blocks: int, head_precision: Precision = Precision.FP8) -> tuple[LayerInfo, ...]:
    """All GEMM layers of an n-block model of `family`, in logged order."""
    prefix, sublayers, heads = FAMILIES[family]
    first = 0 if family == "hf" else 1
    blocks = [body(f"{prefix}.{i}.{sub}", i) for i in range(first, first + n_blocks) for sub in sublayers]
    return (*blocks, *(head(name, head_precision) for name in heads))


def block_names(family: str, *indices: int) -> tuple[str, ...]:
    """Every GEMM layer name of the given logged blocks."""
    prefix, sublayers, _ = FAMILIES[family]
    return tuple(f"{prefix}.{i}.{sub}" for i in indices for sub in sublayers)


def recipe(name: str = "current", **kwargs: object) -> RecipeChoice:
    return RecipeChoice(name, RECIPE_CLASSES[name], dict(kwargs), f"test recipe {name}")


def override(layer: str, *gemms: str) -> GemmOverride:
    return GemmOverride(layer, tuple(gemms), "test override")


def decision(
    layers: Iterable[LayerInfo],
    skip: Iterable[str] = (),
    overrides: Iterable[GemmOverride] = (),
    recipe_choice: RecipeChoice | None = None,
    te_version: str | None = None,
) -> PolicyDecision:
    return PolicyDecision(
        skip_layers=tuple(skip),
        gemm_overrides=tuple(overrides),
        recipe=recipe_choice or recipe(),
        layers=tuple(layers),
        te_version=te_version,
    )


def with_ladder(base: PolicyDecision, rungs: dict[str, str], fp8_param: bool = False) -> PolicyDecision:
    """`base` with a precision ladder (layer -> rung) and the fp8_param flag."""
    entries = tuple(LayerPrecision(name, rung, (f"test rung {rung}",), 0.9) for name, rung in rungs.items())
    return replace(base, layer_precisions=entries, fp8_param=fp8_param)
