"""Megatron-LM's recipe flags for a `PolicyDecision`: `--fp8-format` / `--fp8-recipe` (or the FP4 flags) and the
recipe kwargs Megatron exposes, and whether the Megatron path must leave delayed scaling.

Belongs here: the flags and their comment lines (megatron.py writes them into the script). Must not be here: matchers,
the precision-config YAML, the script.

Rules (Megatron-LM megatron/training/arguments.py, megatron/core/transformer/transformer_config.py): NVFP4 is
`--fp4-format e2m1 --fp4-recipe nvfp4` and never `--fp8-format` / `--fp8-recipe`; delayed scaling rejects transformer
layers in BF16, so the Megatron path then uses tensorwise (current scaling) and says why.
"""

from __future__ import annotations

from fp8_policy.policy.records import MEGATRON_RECIPES, LayerGroup, PolicyDecision
from fp8_policy.policy.render import precision
from fp8_policy.policy.render.layout import fp8_format, merged_overrides

FP4_FLAGS = ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"]
_DELAYED_KWARG_FLAGS = {
    "amax_history_len": "--fp8-amax-history-len",
    "amax_compute_algo": "--fp8-amax-compute-algo",
    "margin": "--fp8-margin",
}


def keeps_block_layers_bf16(decision: PolicyDecision) -> bool:
    """Does the Megatron path run a transformer-block layer outside the outer FP8 recipe (BF16 or a ladder rung)?"""
    groups = {layer.name: layer.structure.group for layer in decision.layers}
    moved = [*precision.whole_bf16_layers(decision), *merged_overrides(decision), *precision.layer_recipes(decision)]
    return any(groups.get(name) is LayerGroup.BODY for name in moved)


def megatron_recipe_name(decision: PolicyDecision) -> str:
    """Our recipe name for Megatron's --fp8-recipe: delayed becomes current scaling when block layers leave it."""
    recipe = decision.recipe.name
    return "current" if recipe == "delayed" and keeps_block_layers_bf16(decision) else recipe


def recipe_flags(decision: PolicyDecision) -> tuple[list[str], list[str]]:
    """(flags, comments) for the FP8 format, recipe and the recipe kwargs Megatron exposes (FP4 flags for NVFP4)."""
    recipe = decision.recipe
    if recipe.name == "nvfp4":
        comments = [
            f"# recipe kwarg {key}={value!r} has no Megatron flag; Megatron builds NVFP4BlockScaling() with TE's defaults."
            for key, value in recipe.kwargs.items()
            if key not in ("fp4_format", "fp8_format")
        ]
        return list(FP4_FLAGS), comments
    name = megatron_recipe_name(decision)
    flags = ["--fp8-format", fp8_format(recipe).lower(), "--fp8-recipe", MEGATRON_RECIPES[name]]
    comments = []
    if name != recipe.name:
        comments.append(
            f"# Megatron path only: --fp8-recipe {MEGATRON_RECIPES[name]} (current scaling), because Megatron rejects"
            " delayed scaling with transformer layers in BF16 (transformer_config.py); the recommended recipe stays"
            " delayed for the TE debug YAML, which keeps these layers in BF16 under it."
        )
    for key, value in recipe.kwargs.items():
        if key == "fp8_format":
            continue
        flag = _DELAYED_KWARG_FLAGS.get(key) if name == "delayed" else None
        if flag == "--fp8-amax-compute-algo" and value not in ("max", "most_recent"):
            flag = None  # Megatron only accepts these two
        if flag:
            flags += [flag, str(value)]
        elif name != recipe.name:
            comments.append(f"# recipe kwarg {key}={value!r} is delayed scaling's; tensorwise scaling does not use it.")
        else:
            comments.append(f"# recipe kwarg {key}={value!r} has no Megatron flag; Megatron uses its own default.")
    return flags, comments
