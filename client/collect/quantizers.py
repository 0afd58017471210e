"""TE's FP8 quantizers reproduced on CPU: per-tensor (current and delayed scaling), MXFP8 and FP8 block scaling.

Belongs here: how a high-precision tensor becomes FP8 bytes plus scale-inverses under each recipe, and the
dequantization TE's `QuantizedTensor.dequantize()` performs. Must not be here: statistics (`stats`) or the
delayed-scaling state across steps (`delayed`).

Each quantizer returns a `Quantized`: `data` (FP8, same shape as the input or its transpose), `scale_inv`
(what TE stores in `_scale_inv` / `_rowwise_scale_inv` / `_columnwise_scale_inv`, without the padding slots)
and `dequantized` (in the input's dtype, as TE's `dequantize()` returns the tensor's fake dtype).

Sources (NVIDIA/TransformerEngine, TE >= 2.8):
- per tensor: `common/recipe/current_scaling.cu` (amax, then `compute_scale_from_amax` with
  `value_for_inf = FLT_MAX`), the cast multiplies in fp32 and stores `scale_inv = 1 / scale`.
- MXFP8: `common/cast/mxfp8/quantize_mxfp8.cuh` (`float_to_e8m0(amax * max_norm_rcp)` per 32 elements,
  elements multiplied by `exp2f_rcp(e)`); `_scale_inv` holds the E8M0 bytes, so TE's
  `mxfp8_scale_inv_min/max` log the biased exponent (118 means 2^-9).
- block scaling: `pytorch/tensor/float8_blockwise_tensor.py` `Float8BlockQuantizer` (128-element tiles,
  `force_pow_2_scales=True`, `amax_epsilon=0`, `block_scaling_dim=2` by default = 128x128 tiles, 1 = 1x128),
  `common/recipe/recipe_common.cuh` `compute_scale_from_types` (`value_for_inf` = the input type's max).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fp8_policy.client.collect.fp8 import (
    Fp8Format,
    abs_ignoring_nan,
    cast_saturated,
    e8m0_to_scale,
    e8m0_to_scale_inv,
    float_to_e8m0,
    scale_from_amax,
)

MXFP8_BLOCK = 32
BLOCK_LEN = 128


@dataclass(slots=True)
class Quantized:
    """One FP8 quantization of one tensor (see the module docstring for the fields)."""

    data: torch.Tensor
    scale_inv: torch.Tensor
    dequantized: torch.Tensor


def as_2d(x: torch.Tensor) -> torch.Tensor:
    """TE's view of a GEMM operand: all leading dims flattened, the last dim kept (a 0-d/1-d tensor is one row)."""
    if x.dim() == 0:
        return x.reshape(1, 1)
    return x.reshape(-1, x.shape[-1])


def quantize_per_tensor(x: torch.Tensor, scale: torch.Tensor, fmt: Fp8Format) -> Quantized:
    """Cast `x` with one float32 `scale` (delayed scaling uses the stored scale, current scaling its own)."""
    scale = scale.float().reshape(())
    data = cast_saturated(x.float() * scale, fmt)
    scale_inv = torch.reciprocal(scale).reshape(1)
    dequantized = (data.float() * scale_inv).to(x.dtype)
    return Quantized(data, scale_inv, dequantized)


def current_scale(x: torch.Tensor, fmt: Fp8Format) -> torch.Tensor:
    """The per-tensor scale TE's current scaling computes for `x` (float32 scalar)."""
    amax = abs_ignoring_nan(x).max() if x.numel() else torch.zeros((), dtype=torch.float32)
    return scale_from_amax(amax, fmt.max)


def quantize_current(x: torch.Tensor, fmt: Fp8Format) -> Quantized:
    """Per-tensor current scaling (`Float8CurrentScalingQuantizer`, power-of-2 scales off, epsilon 0)."""
    return quantize_per_tensor(x, current_scale(x, fmt), fmt)


def _pad_last(x2d: torch.Tensor, multiple: int) -> torch.Tensor:
    pad = (-x2d.shape[-1]) % multiple
    return F.pad(x2d, (0, pad)) if pad else x2d


def quantize_mxfp8(x: torch.Tensor, fmt: Fp8Format, *, columnwise: bool = False) -> Quantized:
    """MXFP8: one E8M0 scale per 32 consecutive elements of a row (columnwise: of a column of the 2-D view).

    TE itself refuses shapes whose dims are not multiples of 32 (`pytorch/csrc/quantizer.cpp`, "MXFP8 requires
    tensor dims that are divisible by 32"). Here a short last block is treated as if zero-padded to 32: zeros
    change neither the block's amax nor any count, so every full block gets exactly TE's result.
    `scale_inv` holds the biased exponents (uint8), as TE's `_rowwise_scale_inv` does.
    """
    x2d = as_2d(x)
    if columnwise:
        x2d = x2d.t()
    rows, cols = x2d.shape
    padded = _pad_last(x2d.float(), MXFP8_BLOCK)
    blocks = padded.reshape(rows, -1, MXFP8_BLOCK)
    amax = abs_ignoring_nan(blocks).amax(dim=-1)
    max_norm_rcp = torch.tensor(1.0 / fmt.max, dtype=torch.float32)
    biased = float_to_e8m0(amax * max_norm_rcp)
    data = cast_saturated(blocks * e8m0_to_scale(biased).unsqueeze(-1), fmt)
    dequantized = (data.float() * e8m0_to_scale_inv(biased).unsqueeze(-1)).reshape(rows, -1)[:, :cols]
    data = data.reshape(rows, -1)[:, :cols]
    if columnwise:
        dequantized = dequantized.t()
    dequantized = dequantized.reshape(x.shape).to(x.dtype)
    return Quantized(data, biased, dequantized)


def _tile_amax_2d(a: torch.Tensor) -> torch.Tensor:
    """amax per 128x128 tile of a zero-padded |x| (shape [ceil(rows/128)*128, ceil(cols/128)*128])."""
    tiles = a.reshape(a.shape[0] // BLOCK_LEN, BLOCK_LEN, a.shape[1] // BLOCK_LEN, BLOCK_LEN)
    return tiles.amax(dim=(1, 3))


def quantize_block(x: torch.Tensor, fmt: Fp8Format, *, block_dims: int = 2, columnwise: bool = False) -> Quantized:
    """FP8 block scaling: power-of-2 scales per 128x128 tile (`block_dims=2`) or per 1x128 row piece (1).

    Edge tiles are partial, as in TE (scale shapes use ceildiv). `scale_inv` holds only the real tiles: TE pads
    its scale tensor to a multiple of 4 with uninitialised memory (`at::empty` in `pytorch/csrc/quantizer.cpp`
    `Float8BlockQuantizer::create_tensor`), which this does not reproduce. For 128x128 tiles the columnwise
    copy has the same tiles, hence the same values.
    """
    if block_dims not in (1, 2):
        raise ValueError(f"block_dims must be 1 (1x128) or 2 (128x128), got {block_dims}")
    value_for_inf = (
        torch.finfo(x.dtype).max if x.dtype in (torch.bfloat16, torch.float16) else torch.finfo(torch.float32).max
    )
    x2d = as_2d(x)
    if columnwise and block_dims == 1:
        x2d = x2d.t()
    rows, cols = x2d.shape
    xf = x2d.float()
    if block_dims == 1:
        padded = _pad_last(xf, BLOCK_LEN).reshape(rows, -1, BLOCK_LEN)
        amax = abs_ignoring_nan(padded).amax(dim=-1)
        scale = scale_from_amax(amax, fmt.max, power_of_2=True, value_for_inf=value_for_inf)
        data = cast_saturated(padded * scale.unsqueeze(-1), fmt)
        scale_inv = torch.reciprocal(scale)
        dequantized = (data.float() * scale_inv.unsqueeze(-1)).reshape(rows, -1)[:, :cols]
        data = data.reshape(rows, -1)[:, :cols]
    else:
        pad_rows, pad_cols = (-rows) % BLOCK_LEN, (-cols) % BLOCK_LEN
        padded = F.pad(xf, (0, pad_cols, 0, pad_rows))
        amax = _tile_amax_2d(abs_ignoring_nan(padded))
        scale = scale_from_amax(amax, fmt.max, power_of_2=True, value_for_inf=value_for_inf)
        per_element = scale.repeat_interleave(BLOCK_LEN, 0).repeat_interleave(BLOCK_LEN, 1)
        data = cast_saturated(padded * per_element, fmt)[:rows, :cols]
        scale_inv = torch.reciprocal(scale)
        per_element_inv = scale_inv.repeat_interleave(BLOCK_LEN, 0).repeat_interleave(BLOCK_LEN, 1)
        dequantized = data.float() * per_element_inv[:rows, :cols]
    if columnwise and block_dims == 1:
        dequantized = dequantized.t()
    dequantized = dequantized.reshape(x.shape).to(x.dtype)
    return Quantized(data, scale_inv, dequantized)
