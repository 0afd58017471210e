"""Recipe vocabulary shared by analysis and recommendation: normalising names and mapping them to stat prefixes.

Belongs here: string tables and `normalize_recipe`. Must not be here: any decision logic.
"""

from __future__ import annotations

RECIPES: tuple[str, ...] = ("delayed", "current", "block", "mxfp8")

# Human names: what the recipe does, then the TE class (https://nvidia.github.io/TransformerEngine, Common API).
RECIPE_LABELS: dict[str, str] = {
    "delayed": "Delayed scaling (DelayedScaling)",
    "current": "Current scaling (Float8CurrentScaling)",
    "block": "Block scaling (Float8BlockScaling)",
    "mxfp8": "MXFP8 block scaling (MXFP8BlockScaling)",
}

# LogFp8TensorStats prefix of each recipe (TE transformer_engine/debug/features/log_fp8_tensor_stats.py,
# `_get_recipe_name`; https://github.com/NVIDIA/TransformerEngine).
STAT_PREFIX: dict[str, str] = {
    "delayed": "fp8_delayed_scaling",
    "current": "fp8_current_scaling",
    "block": "fp8_block_scaling",
    "mxfp8": "mxfp8",
}
PREFIX_RECIPE: dict[str, str] = {prefix: name for name, prefix in STAT_PREFIX.items()}

# Minimum CUDA compute capability: FP8 needs Ada/Hopper (8.9); block scaling Hopper (9.0); MXFP8 Blackwell (10.0).
MIN_CAPABILITY: dict[str, float] = {"delayed": 8.9, "current": 8.9, "block": 9.0, "mxfp8": 10.0}

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
}


def normalize_recipe(text: object) -> str | None:
    """`"DelayedScaling"`, `"transformer_engine.common.recipe.Float8CurrentScaling"`, `"tensorwise"`, ... → our name.

    Returns None for None, empty or unrecognised text.
    """
    if not isinstance(text, str) or not text.strip():
        return None
    key = text.strip().rsplit(".", 1)[-1].lower().replace("_", "").replace("-", "").replace(" ", "")
    return _ALIASES.get(key)
