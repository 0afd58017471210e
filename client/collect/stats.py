"""TE's LogFp8TensorStats statistics of one tensor: `quantization_stats`, and the sums that combine feeds.

Belongs here: the statistic definitions (per feed numerators, how feeds combine into a logged value), the stat
name grammar (`[<recipe>_]<stat>[_columnwise]`, and `LogNvfp4TensorStats`' `nvfp4_underflows%` / `nvfp4_mse`,
which reuse the same sums; see `nvfp4`) and the recipe names. Must not be here: quantization itself
(`quantizers`), model hooks or log files.

Source: NVIDIA/TransformerEngine `transformer_engine/debug/features/utils/stats_computation.py` (TE >= 2.8):
- `add_underflows_stats`: numerator `x.count_nonzero() - count_nonzero_fp8(data)`, logged
  `100 * sum(num) / sum(numel)`; zeros of `x` count in the denominator.
- `compute_fp8_delayed_scaling_overflows_num`: `#(x > fp8_max * scale_inv) + #(x < -fp8_max * scale_inv)`.
- `add_scale_inv_stats`: `nonzero_min(scale_inv)` (zeros are padding, TE >= 2.17) and `scale_inv.max()`;
  combined with min / max over feeds.
- `add_mse_stats`: `F.mse_loss(x, dequantize(q), reduction="sum")`, logged `sum / sum(numel)`.
and `transformer_engine/debug/features/log_fp8_tensor_stats.py` `LogFp8TensorStats.check_if_stat_is_supported`
for which names are valid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fp8_policy.client.collect.fp8 import Fp8Format, count_nonzero_fp8
from fp8_policy.client.collect.fp8 import fp8_format as resolve_format
from fp8_policy.client.collect.nvfp4 import nvfp4_sums, quantize_nvfp4
from fp8_policy.client.collect.quantizers import (
    Quantized,
    quantize_block,
    quantize_current,
    quantize_mxfp8,
    quantize_per_tensor,
)

# Short recipe names used by this package -> the prefixes TE uses in stat names (ALL_RECIPE_NAMES).
TE_RECIPE_NAMES = {
    "delayed": "fp8_delayed_scaling",
    "current": "fp8_current_scaling",
    "mxfp8": "mxfp8",
    "block": "fp8_block_scaling",
    "nvfp4": "nvfp4",  # LogNvfp4TensorStats' names (TE refuses an nvfp4_ what-if in LogFp8TensorStats)
}
RECIPE_BY_TE_NAME = {te: short for short, te in TE_RECIPE_NAMES.items()}
QUANT_STATS = ("underflows%", "scale_inv_min", "scale_inv_max", "mse")
NVFP4_STATS = ("underflows%", "mse")  # `log_nvfp4_tensor_stats.py` check_if_stat_is_supported
OVERFLOWS = "overflows%"


@dataclass(frozen=True, slots=True)
class StatName:
    """A parsed LogFp8TensorStats name: `recipe` is a short name or None (the training recipe)."""

    text: str
    recipe: str | None
    base: str
    columnwise: bool

    @property
    def feature(self) -> str:
        """The TE debug feature that logs this stat."""
        return "LogNvfp4TensorStats" if self.recipe == "nvfp4" else "LogFp8TensorStats"


def parse_stat_name(text: str) -> StatName:
    """Split `[<recipe>_]<stat>[_columnwise]`; ValueError for anything LogFp8TensorStats would not know."""
    body, columnwise = (text[: -len("_columnwise")], True) if text.endswith("_columnwise") else (text, False)
    recipe = None
    for short, te_name in TE_RECIPE_NAMES.items():
        if body.startswith(te_name + "_"):
            recipe, body = short, body[len(te_name) + 1 :]
            break
    if body not in (*QUANT_STATS, OVERFLOWS):
        raise ValueError(
            f"stat {text!r}: unknown statistic {body!r}; expected one of "
            f"{', '.join((*QUANT_STATS, OVERFLOWS))} with an optional recipe prefix"
        )
    if columnwise and recipe not in ("mxfp8", "block"):
        raise ValueError(f"stat {text!r}: _columnwise exists only for mxfp8_ and fp8_block_scaling_ stats")
    if recipe == "nvfp4" and body not in NVFP4_STATS:
        raise ValueError(f"stat {text!r}: NVFP4 statistics are {', '.join('nvfp4_' + s for s in NVFP4_STATS)}")
    if body == OVERFLOWS and recipe not in (None, "delayed"):
        raise ValueError(f"stat {text!r}: overflows% exists only for delayed scaling")
    return StatName(text, recipe, body, columnwise)


def check_stat(stat: StatName, training_recipe: str) -> StatName:
    """`stat` if TE can log it while training with `training_recipe`; ValueError naming TE's refusal otherwise."""
    if stat.base == OVERFLOWS and training_recipe != "delayed":
        raise ValueError(f"stat {stat.text!r}: overflows% exists only when training with delayed scaling")
    if training_recipe == "nvfp4" and stat.recipe is None:
        raise ValueError(
            f"stat {stat.text!r}: under NVFP4 training TE logs nvfp4_underflows% / nvfp4_mse "
            "(LogNvfp4TensorStats); LogFp8TensorStats' bare stats raise there"
        )
    if stat.recipe == "delayed" and training_recipe != "delayed":
        raise ValueError(
            f"stat {stat.text!r}: delayed-scaling stats need delayed-scaling training "
            "(TE: 'Cannot recreate quantizer for fp8_delayed_scaling')"
        )
    return stat


@dataclass(slots=True)
class QuantSums:
    """Numerators of one or more feeds of one tensor under one recipe; `value(stat)` is what TE logs."""

    numel: int = 0
    underflows: int = 0
    overflows: int = 0
    square_error: float = 0.0
    scale_inv_min: float = math.inf
    scale_inv_max: float = -math.inf

    def add(self, other: QuantSums) -> None:
        """Combine another feed (micro-batch) the way TE's `_Buffer.feed` combinators do."""
        self.numel += other.numel
        self.underflows += other.underflows
        self.overflows += other.overflows
        self.square_error += other.square_error
        self.scale_inv_min = min(self.scale_inv_min, other.scale_inv_min)
        self.scale_inv_max = max(self.scale_inv_max, other.scale_inv_max)

    def value(self, base: str) -> float:
        if base == "underflows%":
            return 100.0 * self.underflows / self.numel
        if base == OVERFLOWS:
            return 100.0 * self.overflows / self.numel
        if base == "mse":
            return self.square_error / self.numel
        if base == "scale_inv_min":
            return self.scale_inv_min
        if base == "scale_inv_max":
            return self.scale_inv_max
        raise ValueError(f"unknown statistic {base!r}")


def _nonzero_min(scale_inv: torch.Tensor) -> float:
    values = scale_inv.float()
    nonzero = values[values != 0]
    return float(nonzero.min()) if nonzero.numel() else 0.0


def sums_of(
    x: torch.Tensor, q: Quantized, fmt: Fp8Format, *, overflow_scale_inv: torch.Tensor | None = None
) -> QuantSums:
    """The numerators of one feed: `x` high precision, `q` its quantization (see module docstring for sources)."""
    sums = QuantSums(numel=x.numel())
    sums.underflows = int(x.count_nonzero().item()) - count_nonzero_fp8(q.data)
    sums.square_error = float(F.mse_loss(x, q.dequantized.to(x.dtype), reduction="sum").item())
    sums.scale_inv_min = _nonzero_min(q.scale_inv)
    sums.scale_inv_max = float(q.scale_inv.float().max())
    if overflow_scale_inv is not None:
        limit = fmt.max * overflow_scale_inv.float().reshape(1)
        xf = x.float()
        sums.overflows = int(((xf > limit) | (xf < -limit)).sum().item())
    return sums


def nvfp4_quant_sums(
    x: torch.Tensor,
    *,
    two_d: bool = False,
    stochastic_rounding: bool = False,
    generator: torch.Generator | None = None,
) -> QuantSums:
    """The numerators of one `LogNvfp4TensorStats` feed: `x` quantized to NVFP4 (16x16 tiles with `two_d`)."""
    q = quantize_nvfp4(x, two_d=two_d, stochastic_rounding=stochastic_rounding, generator=generator)
    numel, underflows, square_error = nvfp4_sums(x, q)
    return QuantSums(numel=numel, underflows=underflows, square_error=square_error)


def quantize(
    x: torch.Tensor,
    recipe: str,
    fmt: Fp8Format,
    *,
    scale: torch.Tensor | None = None,
    columnwise: bool = False,
    block_dims: int = 2,
) -> Quantized:
    """`x` quantized under `recipe` ("current", "delayed" with its float32 `scale`, "mxfp8", "block")."""
    if recipe == "delayed":
        if scale is None:
            raise ValueError("delayed scaling quantizes with a given scale: pass scale_inv")
        return quantize_per_tensor(x, scale, fmt)
    if scale is not None:
        raise ValueError(f"scale_inv is only used by delayed scaling, not by {recipe!r}")
    if recipe == "current":
        return quantize_current(x, fmt)
    if recipe == "mxfp8":
        return quantize_mxfp8(x, fmt, columnwise=columnwise)
    if recipe == "block":
        return quantize_block(x, fmt, block_dims=block_dims, columnwise=columnwise)
    raise ValueError(f"unknown recipe {recipe!r}; expected one of {', '.join(TE_RECIPE_NAMES)}")


def quantization_sums(
    x: torch.Tensor,
    *,
    fp8_format: str | Fp8Format = "E4M3",
    recipe: str = "current",
    scale_inv: float | torch.Tensor | None = None,
    columnwise: bool = False,
    block_dims: int = 2,
    two_d: bool = False,
) -> QuantSums:
    """The per-feed numerators behind `quantization_stats` (add several with `QuantSums.add`)."""
    fmt = resolve_format(fp8_format)
    if x.numel() == 0:
        raise ValueError("an empty tensor has no FP8 statistics (TE skips empty feeds)")
    if not x.is_floating_point():
        raise ValueError(f"expected a floating-point tensor, got {x.dtype}")
    x = x.detach()
    if recipe == "nvfp4":
        if scale_inv is not None or columnwise:
            raise ValueError("nvfp4 statistics take no scale_inv and have no columnwise variant")
        return nvfp4_quant_sums(x, two_d=two_d)
    scale = None
    overflow_scale_inv = None
    if scale_inv is not None:
        overflow_scale_inv = torch.as_tensor(scale_inv, dtype=torch.float32).reshape(())
        if not (math.isfinite(float(overflow_scale_inv)) and float(overflow_scale_inv) > 0):
            raise ValueError(f"scale_inv must be a positive finite number, got {float(overflow_scale_inv)}")
        scale = torch.reciprocal(overflow_scale_inv)
    q = quantize(x, recipe, fmt, scale=scale, columnwise=columnwise, block_dims=block_dims)
    return sums_of(x, q, fmt, overflow_scale_inv=overflow_scale_inv if recipe == "delayed" else None)


def quantization_stats(
    tensor: torch.Tensor,
    *,
    fp8_format: str = "E4M3",
    recipe: str = "current",
    scale_inv: float | torch.Tensor | None = None,
    columnwise: bool = False,
    block_dims: int = 2,
    two_d: bool = False,
) -> dict[str, float]:
    """TE's LogFp8TensorStats values for one tensor quantized under one recipe, computed on CPU.

    Returns `underflows%`, `scale_inv_min`, `scale_inv_max`, `mse`, plus `overflows%` for
    `recipe="delayed"`, which needs the `scale_inv` the cast used (TE's delayed scaling takes it from the amax
    history; see `DelayedScaler`). `recipe="current"` computes its own scale (amax 0, NaN or inf -> scale 1).
    `mxfp8` scale-inverses are E8M0 biased exponents (127 means 1.0) as TE logs them; `block` uses 128x128
    tiles like TE's what-if quantizer (`block_dims=1` for the 1x128 tiles the training recipe uses on
    activations and gradients). `columnwise` applies to mxfp8 and block only. `recipe="nvfp4"` returns
    `underflows%` and `mse` as `LogNvfp4TensorStats` defines them (1x16 blocks; `two_d=True`: the 16x16
    tiles TE uses for weights).

    Definitions: `transformer_engine/debug/features/utils/stats_computation.py` (`add_underflows_stats`,
    `add_scale_inv_stats`, `add_mse_stats`, `compute_fp8_delayed_scaling_overflows_num`); scales:
    `common/recipe/recipe_common.cuh` `compute_scale_from_amax`. Unverified against TE on a GPU.
    """
    if columnwise and recipe not in ("mxfp8", "block"):
        raise ValueError("columnwise statistics exist only for the mxfp8 and block recipes")
    sums = quantization_sums(
        tensor,
        fp8_format=fp8_format,
        recipe=recipe,
        scale_inv=scale_inv,
        columnwise=columnwise,
        block_dims=block_dims,
        two_d=two_d,
    )
    if recipe == "nvfp4":
        return {base: sums.value(base) for base in NVFP4_STATS}
    out = {base: sums.value(base) for base in QUANT_STATS}
    if recipe == "delayed":
        out[OVERFLOWS] = sums.value(OVERFLOWS)
    return out
