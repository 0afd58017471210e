"""Recipe vocabulary shared by analysis and recommendation: normalising names and mapping them to stat prefixes.

Belongs here: string tables and `normalize_recipe`. Must not be here: any decision logic.
"""

from __future__ import annotations

# FP8 recipes (a recipe switch picks among these) and every TE 2.20 recipe (NVFP4BlockScaling is 4-bit: never an
# "FP8 what-if" target; TE refuses an `nvfp4_` what-if prefix in LogFp8TensorStats, LogNvfp4TensorStats logs it).
FP8_RECIPES: tuple[str, ...] = ("delayed", "current", "block", "mxfp8")
RECIPES: tuple[str, ...] = (*FP8_RECIPES, "nvfp4")

# Human names: what the recipe does, then the TE class (https://nvidia.github.io/TransformerEngine, Common API).
RECIPE_LABELS: dict[str, str] = {
    "delayed": "Delayed scaling (DelayedScaling)",
    "current": "Current scaling (Float8CurrentScaling)",
    "block": "Block scaling (Float8BlockScaling)",
    "mxfp8": "MXFP8 block scaling (MXFP8BlockScaling)",
    "nvfp4": "NVFP4 block scaling (NVFP4BlockScaling)",
}

# LogFp8TensorStats prefix of each recipe (TE transformer_engine/debug/features/log_fp8_tensor_stats.py,
# `_get_recipe_name`; https://github.com/NVIDIA/TransformerEngine).
STAT_PREFIX: dict[str, str] = {
    "delayed": "fp8_delayed_scaling",
    "current": "fp8_current_scaling",
    "block": "fp8_block_scaling",
    "mxfp8": "mxfp8",
    "nvfp4": "nvfp4",  # LogNvfp4TensorStats' `nvfp4_underflows%` / `nvfp4_mse`
}
PREFIX_RECIPE: dict[str, str] = {prefix: name for name, prefix in STAT_PREFIX.items()}

# Minimum CUDA compute capability: FP8 needs Ada/Hopper (8.9); block scaling Hopper (9.0); MXFP8 and NVFP4
# Blackwell (10.0). TE 2.20 refuses MXFP8 on 12.0 and above (`pytorch/quantization.py` `_compute_mxfp8_support`).
MIN_CAPABILITY: dict[str, float] = {"delayed": 8.9, "current": 8.9, "block": 9.0, "mxfp8": 10.0, "nvfp4": 10.0}
MAX_CAPABILITY: dict[str, float] = {"mxfp8": 12.0}  # supported strictly below


def supported(recipe: str, capability: float) -> bool:
    """Whether TE runs `recipe` on a GPU of this compute capability."""
    return MIN_CAPABILITY[recipe] <= capability < MAX_CAPABILITY.get(recipe, float("inf"))


_ALIASES: dict[str, str] = {
    "delayed": "delayed",
    "delayedscaling": "delayed",
    "fp8delayedscaling": "delayed",
    "current": "current",
    "tensorwise": "current",
    "float8currentscaling": "current",
    "currentscaling": "current",
    "fp8currentscaling": "current",
    "pertensor": "current",
    "block": "block",
    "blockwise": "block",
    "float8blockscaling": "block",
    "blockscaling": "block",
    "fp8blockscaling": "block",
    "mxfp8": "mxfp8",
    "mxfp8blockscaling": "mxfp8",
    "nvfp4": "nvfp4",
    "nvfp4blockscaling": "nvfp4",
}


def normalize_recipe(text: object) -> str | None:
    """`"DelayedScaling"`, `"transformer_engine.common.recipe.Float8CurrentScaling"`, `"tensorwise"`, ... → our name.

    Returns None for None, empty or unrecognised text.
    """
    if not isinstance(text, str) or not text.strip():
        return None
    key = text.strip().rsplit(".", 1)[-1].lower().replace("_", "").replace("-", "").replace(" ", "")
    return _ALIASES.get(key)
