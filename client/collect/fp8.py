"""FP8 number formats and the element-level operations TE's kernels perform, reproduced with torch on CPU.

Belongs here: the two FP8 formats (max finite values, torch dtypes), the saturating cast, TE's amax (NaN
ignored), TE's `compute_scale_from_amax`, the E8M0 exponent of MXFP8 scales, and the zero count of FP8 bytes.
Must not be here: recipes (how tensors are split into scaled blocks, see `quantizers`) or statistics.

Sources (NVIDIA/TransformerEngine, TE >= 2.8):
- `transformer_engine/common/recipe/recipe_common.cuh` `compute_scale_from_amax`: scale = fp8_max / amax in
  fp32; amax 0, NaN or inf -> scale 1; an infinite quotient -> `value_for_inf`; optional power-of-2 rounding
  by masking the mantissa bits (`scale_bits &= 0xFF800000`).
- `transformer_engine/common/recipe/current_scaling.cu` `amax_kernel`: `fmaxf(fabsf(x), amax)`, and CUDA's
  fmaxf returns the non-NaN operand, so NaN elements do not enter the amax.
- `transformer_engine/common/util/ptx_arch_spec.cuh` `float_to_e8m0`: the biased exponent rounded up
  (non-Blackwell branch; the Blackwell `cvt.rp.satfinite.ue8m0x2` instruction rounds the same way).
- `transformer_engine/debug/features/utils/stats_computation.py` `count_nonzero_fp8`: bytes 0x00 and 0x80
  (-0) are both zero.
- CUDA's `__nv_fp8_e4m3(float)` / `__nv_fp8_e5m2(float)` convert with `__NV_SATFINITE`: out-of-range values
  (inf included) become +-max, NaN stays NaN, rounding is to nearest even. torch's CPU casts round to nearest
  even too, but on torch 2.13 `float8_e5m2` overflows to inf, so values are clamped before the cast.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

FLT_MAX = torch.finfo(torch.float32).max


@dataclass(frozen=True, slots=True)
class Fp8Format:
    """One FP8 element format: its name as TE spells it, the torch dtype and the largest finite value."""

    name: str
    dtype: torch.dtype
    max: float


E4M3 = Fp8Format("E4M3", torch.float8_e4m3fn, 448.0)
E5M2 = Fp8Format("E5M2", torch.float8_e5m2, 57344.0)
FORMATS = {"E4M3": E4M3, "E5M2": E5M2}


def fp8_format(name: str | Fp8Format) -> Fp8Format:
    """The format called `name` ("E4M3" or "E5M2", any case); ValueError otherwise."""
    if isinstance(name, Fp8Format):
        return name
    found = FORMATS.get(str(name).upper())
    if found is None:
        raise ValueError(f"unknown FP8 format {name!r}; expected one of {', '.join(FORMATS)}")
    return found


def cast_saturated(scaled: torch.Tensor, fmt: Fp8Format) -> torch.Tensor:
    """`scaled` (float32) cast to FP8 the way `__NV_SATFINITE` does: clamp to +-max (inf too), NaN kept."""
    return scaled.clamp(min=-fmt.max, max=fmt.max).to(fmt.dtype)


def count_nonzero_fp8(data: torch.Tensor) -> int:
    """Elements of an FP8 tensor that are neither +0 (0x00) nor -0 (0x80); NaN bytes count as non-zero."""
    raw = data.view(torch.uint8)
    return int(raw.numel() - ((raw == 0) | (raw == 0x80)).sum().item())


def abs_ignoring_nan(x: torch.Tensor) -> torch.Tensor:
    """|x| in float32 with NaN replaced by 0, so a max over it behaves like CUDA's fmaxf."""
    a = x.float().abs()
    return torch.where(torch.isnan(a), torch.zeros((), dtype=a.dtype), a)


def scale_from_amax(
    amax: torch.Tensor, fp8_max: float, *, power_of_2: bool = False, value_for_inf: float = FLT_MAX
) -> torch.Tensor:
    """TE's `compute_scale_from_amax` (epsilon 0) element-wise on a float32 amax tensor."""
    amax = amax.float()
    quotient = torch.tensor(fp8_max, dtype=torch.float32) / amax
    quotient = torch.where(torch.isinf(quotient), torch.tensor(value_for_inf, dtype=torch.float32), quotient)
    degenerate = torch.isinf(amax) | torch.isnan(amax) | (amax == 0)
    scale = torch.where(degenerate, torch.ones((), dtype=torch.float32), quotient)
    if power_of_2:
        scale = (scale.view(torch.int32) & ~0x7FFFFF).view(torch.float32)  # keep sign and exponent
    return scale


def float_to_e8m0(value: torch.Tensor) -> torch.Tensor:
    """TE's `float_to_e8m0` on a non-negative float32 tensor: the biased exponent of `value`, rounded up (uint8)."""
    value = value.float().contiguous()
    bits = value.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    exponent = (bits >> 23) & 0xFF
    mantissa = bits & 0x7FFFFF
    round_up = (mantissa > 0) & (exponent != 0xFE) & ~((exponent == 0) & (mantissa <= 0x400000))
    exponent = exponent + round_up.to(torch.int64)
    exponent = torch.where(value == 0, torch.zeros_like(exponent), exponent)
    exponent = torch.where(torch.isinf(value), torch.full_like(exponent, 0xFE), exponent)
    exponent = torch.where(torch.isnan(value), torch.full_like(exponent, 0xFF), exponent)
    return exponent.to(torch.uint8)


def e8m0_to_scale(biased: torch.Tensor) -> torch.Tensor:
    """The multiplier TE applies before the cast, `exp2f_rcp(biased)` = 2^(127 - e) (util/ptx.cuh), as float32."""
    e = biased.to(torch.int64)
    bits = ((254 - e).clamp(min=0) << 23).to(torch.int32)
    scale = bits.view(torch.float32)
    scale = torch.where(e == 254, torch.tensor(2.0**-127, dtype=torch.float32), scale)
    return torch.where(e == 255, torch.tensor(float("nan"), dtype=torch.float32), scale)


def e8m0_to_scale_inv(biased: torch.Tensor) -> torch.Tensor:
    """2^(e - 127) as float32 (`exp2f` in util/ptx.cuh): what a dequantization multiplies by."""
    return torch.exp2(biased.to(torch.float32) - 127.0)
