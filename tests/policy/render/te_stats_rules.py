"""What TE 2.20 refuses in a debug config, re-implemented from its source for the renderer tests.

Read from NVIDIA/TransformerEngine (d0067d0, 2.20.0.dev0):
* transformer_engine/debug/features/log_fp8_tensor_stats.py `LogFp8TensorStats.check_if_stat_is_supported`: a stat
  without a recipe prefix takes the layer's own recipe (`_get_recipe_name(quantizer)`: fp8_delayed_scaling,
  fp8_current_scaling, mxfp8, fp8_block_scaling, nvfp4); an `nvfp4` recipe raises; `overflows%` only with
  fp8_delayed_scaling; `underflows%`/`overflows%`/`mse` need the high-precision tensor (none for the weight with
  FP8 parameters); `_columnwise` not for delayed/current; other stats: underflows%, scale_inv_min/max, mse.
  `inspect_tensor` asserts `rowwise_quantized_tensor is columnwise_quantized_tensor` BEFORE its "no quantizer"
  skip, which is what stops a run when a layer outside FP8 is watched (seen on an H100 with TE 2.20.2).
* log_nvfp4_tensor_stats.py `check_if_stat_is_supported`: only `underflows%` and `mse` (no prefix).
"""

from __future__ import annotations

TE_RECIPE = {
    "delayed": "fp8_delayed_scaling",
    "current": "fp8_current_scaling",
    "block": "fp8_block_scaling",
    "mxfp8": "mxfp8",
    "nvfp4": "nvfp4",
}
ALL_RECIPE_NAMES = ("fp8_delayed_scaling", "fp8_current_scaling", "mxfp8", "fp8_block_scaling")
NEED_HIGH_PRECISION = ("underflows%", "overflows%", "mse")


def fp8_stat_error(stat: str, layer_recipe: str, high_precision_tensor: bool) -> str | None:
    """Why LogFp8TensorStats would raise for `stat` on a layer quantized with `layer_recipe` (None: accepted)."""
    columnwise = stat.endswith("_columnwise")
    if columnwise:
        stat = stat[: -len("_columnwise")]
    current = TE_RECIPE[layer_recipe]
    recipe = next((name for name in ALL_RECIPE_NAMES if name in stat), current)
    bare = stat.replace(recipe + "_", "")
    if bare in NEED_HIGH_PRECISION and not high_precision_tensor:
        return f"{stat} needs a high precision tensor"
    if recipe == "nvfp4":
        return f"Cannot compute NVFP4 stats '{stat}' in LogFp8TensorStats"
    if recipe in ("fp8_delayed_scaling", "fp8_current_scaling") and columnwise:
        return f"{stat}: no columnwise stats for {recipe}"
    if recipe == "fp8_delayed_scaling" and bare == "overflows%":
        return None
    if bare not in ("underflows%", "scale_inv_min", "scale_inv_max", "mse"):
        return f"{stat} contains an unsupported stat name: {bare}"
    return None


def nvfp4_stat_error(stat: str) -> str | None:
    return None if stat in ("underflows%", "mse") else f"Stat {stat} is not supported for NVFP4"


def config_errors(config: dict, layer_precision: str, fp8_param: bool) -> list[str]:
    """Every reason TE would stop when `config` (one layer's transformer_engine features) meets a layer running
    at `layer_precision` (bf16 = outside FP8/FP4)."""
    out = []
    for feature, body in config.items():
        if not body.get("enabled", False):
            continue
        if feature == "LogFp8TensorStats":
            if layer_precision == "bf16":
                out.append("LogFp8TensorStats on a layer outside FP8 (TE asserts in inspect_tensor)")
                continue
            for struct in body.get("tensors_struct", []):
                high = not (fp8_param and struct["tensor"] == "weight")
                out += [e for s in struct["stats"] if (e := fp8_stat_error(s, layer_precision, high))]
        elif feature == "LogNvfp4TensorStats":
            for struct in body.get("tensors_struct", []):
                out += [e for s in struct["stats"] if (e := nvfp4_stat_error(s))]
                if fp8_param and struct["tensor"] == "weight":
                    out.append("LogNvfp4TensorStats on an FP4 weight has no high-precision tensor")
    return out
