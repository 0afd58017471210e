"""TE's NVFP4 quantizer (`NVFP4BlockScaling`) reproduced on CPU: E2M1 values, E4M3 block scales, an FP32 tensor scale.

Belongs here: how a high-precision tensor becomes NVFP4 (4-bit E2M1 codes, one E4M3 decode scale per 16 elements
of a row or per 16x16 tile, one per-tensor amax) and back, with TE's rounding, plus the numerators of
`LogNvfp4TensorStats`' `nvfp4_underflows%` and `nvfp4_mse`; `fake_quantize_nvfp4`, the same cast without the codes
(bit for bit the dequantized tensor) for training's GEMM operands. Must not be here: FP8 recipes (`quantizers`), hooks.

Sources (NVIDIA/TransformerEngine, TE 2.20):
- `common/cast/nvfp4/core_nvfp4.cuh`: `compute_global_encode_scaling_factor_FP4`: S_enc = 448 * 6 / amax in fp32,
  capped at FLT_MAX, 1 when amax is 0; the block decode scale is `fp8e4m3(block_amax * (S_enc * (1/6)))`; the
  element multiplier `compute_scaling_coefficient<float>` is `min(1 / (float(S_dec_block) * (1 / S_enc)), FLT_MAX)`.
  A block whose decode scale rounds to E4M3 zero therefore gets the multiplier FLT_MAX: its elements mostly
  saturate to +-6 (non-zero codes, not counted as underflows) yet dequantize to 0. TE's Python reference does the
  same; whether the GPU kernel flushes float32 subnormal inputs first was not checked (it needs a Blackwell GPU).
- `pytorch/custom_recipes/quantization_nvfp4.py` `NVFP4QuantizerRef` (TE's own Python reference):
  `cast_to_fp4x2` rounds to the nearest E2M1 value with ties to the even code (0.25 -> 0, 0.75 -> 1, 1.25 -> 1,
  1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4), values beyond 6 saturate; 2-D quantization (`quant_tile_shape=(16, 16)`,
  weights) takes one amax per 16x16 tile and writes it for each of the tile's rows; inputs are zero-padded to whole
  tiles; the random Hadamard transform is applied to the columnwise (wgrad) copy only.
- `common/cast/nvfp4/dequantize_nvfp4.cuh`: value = e2m1 * (float(scale) * amax * (1 / (6 * 448))).
- `debug/features/utils/stats_computation.py`: `count_nonzero_nvfp4` (codes 0 and 8 are zeros),
  `nvfp4_underflows_num = x.count_nonzero() - count_nonzero_nvfp4(rowwise data)`, `nvfp4_mse` from
  `F.mse_loss(x, dequantize(), reduction="sum")`; both over the rowwise data only.

Emulated: all of the above, and stochastic rounding (`cvt.rs` rounds up with probability equal to the distance
from the lower grid value over the gap; here with torch's generator, not TE's Philox stream, so single draws
differ while the distribution is the same). Not emulated here: the random Hadamard transform (it changes only the
columnwise copy, which no statistic reads; `emulated_linear` applies it for training), `row_scaled_activation`,
`nvfp4_4over6` and the 1x64 / per-token variants.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fp8_policy.client.collect.fp8 import FLT_MAX

E2M1_MAX = 6.0
E4M3_MAX = 448.0
NVFP4_BLOCK = 16
# Magnitudes of the E2M1 codes 0..7; codes 8..15 are the same with the sign bit set.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
SIGN = 8


@dataclass(slots=True)
class Nvfp4Quantized:
    """One NVFP4 quantization of a 2-D view: `codes` (uint8 0..15, bit 3 the sign, one per element, unpacked),
    `block_scales` (float8_e4m3fn, one per 16 elements of a row), `amax` (float32 scalar) and `dequantized`
    (float32, the input's shape)."""

    codes: torch.Tensor
    block_scales: torch.Tensor
    amax: torch.Tensor
    dequantized: torch.Tensor

    def nonzero(self) -> int:
        """Elements whose code is neither +0 nor -0 (`count_nonzero_nvfp4`)."""
        return int(((self.codes & 7) != 0).sum().item())


def global_encode_scale(amax: torch.Tensor) -> torch.Tensor:
    """S_enc = 448 * 6 / amax (float32), FLT_MAX when that overflows, 1 for amax 0 (`core_nvfp4.cuh`)."""
    amax = amax.float()
    scale = torch.tensor(E4M3_MAX * E2M1_MAX, dtype=torch.float32) / amax
    scale = torch.clamp(scale, max=FLT_MAX)
    return torch.where((amax == 0) | (scale == 0), torch.ones((), dtype=torch.float32), scale)


def e2m1_codes(
    scaled: torch.Tensor, *, stochastic: bool = False, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Codes of float32 values already multiplied by their block's encode scale (saturating at +-6).

    Round to nearest, ties to the even code, as `cast_to_fp4x2`; or stochastic rounding between the two
    neighbouring grid values. NaN becomes +6 here (TE's inputs are finite in practice; the GPU's cvt gives NaN).
    """
    magnitude = torch.nan_to_num(scaled.abs(), nan=E2M1_MAX).clamp(max=E2M1_MAX)
    if stochastic:
        grid = torch.tensor(E2M1_VALUES, dtype=torch.float32)
        below = (torch.bucketize(magnitude, grid, right=True) - 1).clamp(0, len(E2M1_VALUES) - 1)
        above = (below + 1).clamp(max=len(E2M1_VALUES) - 1)
        lo, hi = grid[below], grid[above]
        gap = torch.where(hi > lo, hi - lo, torch.ones_like(hi))
        draw = torch.rand(magnitude.shape, generator=generator, dtype=torch.float32, device=magnitude.device)
        index = torch.where(draw < (magnitude - lo) / gap, above, below)
    else:
        # Count the midpoints passed; at a midpoint itself step up only when that lands on an even code
        # (`cast_to_fp4x2`'s thresholds: > 0.25, >= 0.75, > 1.25, >= 1.75, > 2.5, >= 3.5, > 5).
        index = torch.zeros(magnitude.shape, dtype=torch.int64)
        for k, midpoint in enumerate(_MIDPOINTS):
            index += (magnitude >= midpoint) if k % 2 else (magnitude > midpoint)
    negative = torch.signbit(scaled) & ~torch.isnan(scaled)
    return (index + SIGN * negative.to(index.dtype)).to(torch.uint8)


def e2m1_values(codes: torch.Tensor) -> torch.Tensor:
    """The float32 values of E2M1 codes (code 8 is -0.0)."""
    table = torch.tensor([*E2M1_VALUES, *(-v for v in E2M1_VALUES)], dtype=torch.float32)
    return table[codes.long()]


def _as_2d(x: torch.Tensor) -> torch.Tensor:
    if x.dim() == 0:
        return x.reshape(1, 1)
    return x.reshape(-1, x.shape[-1])


@dataclass(slots=True)
class _Encoded:
    """A 2-D view split into scaled blocks: what the E2M1 cast rounds, and what dequantizes it again."""

    scaled: torch.Tensor  # [padded rows, blocks, 16]: elements times their block's encode multiplier
    block_scales: torch.Tensor  # float8_e4m3fn decode scale per block
    amax: torch.Tensor
    final_scale: torch.Tensor  # float32 per block: a code's value times this is the dequantized element
    rows: int
    cols: int


def _encode(x: torch.Tensor, two_d: bool, amax: torch.Tensor | None) -> _Encoded:
    x2d = _as_2d(x).float()
    rows, cols = x2d.shape
    magnitude = torch.nan_to_num(x2d.abs(), nan=0.0)
    if amax is None:
        amax = magnitude.max() if x2d.numel() else torch.zeros((), dtype=torch.float32)
    amax = amax.float().reshape(())
    s_enc = global_encode_scale(amax)
    pad_rows = (-rows) % NVFP4_BLOCK if two_d else 0
    pad_cols = (-cols) % NVFP4_BLOCK
    padded = F.pad(x2d, (0, pad_cols, 0, pad_rows))
    padded_mag = F.pad(magnitude, (0, pad_cols, 0, pad_rows))
    prows, pcols = padded.shape
    blocks = padded.reshape(prows, pcols // NVFP4_BLOCK, NVFP4_BLOCK)
    if two_d:
        tiles = padded_mag.reshape(prows // NVFP4_BLOCK, NVFP4_BLOCK, pcols // NVFP4_BLOCK, NVFP4_BLOCK)
        block_amax = tiles.amax(dim=(1, 3)).repeat_interleave(NVFP4_BLOCK, dim=0)
    else:
        block_amax = padded_mag.reshape(prows, -1, NVFP4_BLOCK).amax(dim=-1)
    fp4_max_inv = torch.tensor(1.0 / E2M1_MAX, dtype=torch.float32)
    decode = torch.clamp(block_amax * (s_enc * fp4_max_inv), max=FLT_MAX)
    block_scales = decode.clamp(max=E4M3_MAX).to(torch.float8_e4m3fn)
    s_dec = torch.reciprocal(s_enc)
    multiplier = torch.clamp(torch.reciprocal(block_scales.float() * s_dec), max=FLT_MAX)
    factor_inv = torch.tensor(1.0 / (E2M1_MAX * E4M3_MAX), dtype=torch.float32)
    final_scale = block_scales.float() * amax * factor_inv
    return _Encoded(blocks * multiplier.unsqueeze(-1), block_scales, amax, final_scale, rows, cols)


def _decoded(encoded: _Encoded, values: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """E2M1 values (per padded block element) back to the input's shape in float32."""
    dequantized = values * encoded.final_scale.unsqueeze(-1)
    prows, blocks, block = dequantized.shape
    return dequantized.reshape(prows, blocks * block)[: encoded.rows, : encoded.cols].reshape(shape)


def quantize_nvfp4(
    x: torch.Tensor,
    *,
    two_d: bool = False,
    stochastic_rounding: bool = False,
    generator: torch.Generator | None = None,
    amax: torch.Tensor | None = None,
) -> Nvfp4Quantized:
    """NVFP4 rowwise quantization of `x` (as its 2-D view): 1x16 blocks, or 16x16 tiles with `two_d` (weights).

    `amax` overrides the per-tensor amax (TE computes it from the tensor; NaN elements are ignored).
    """
    encoded = _encode(x, two_d, amax)
    codes = e2m1_codes(encoded.scaled, stochastic=stochastic_rounding, generator=generator)
    dequantized = _decoded(encoded, e2m1_values(codes), x.shape)
    prows = codes.shape[0]
    codes = codes.reshape(prows, -1)[: encoded.rows, : encoded.cols]
    return Nvfp4Quantized(codes, encoded.block_scales[: encoded.rows], encoded.amax, dequantized)


def e2m1_rounded(
    scaled: torch.Tensor, *, stochastic: bool = False, generator: torch.Generator | None = None
) -> torch.Tensor:
    """`e2m1_values(e2m1_codes(scaled, ...))` without the codes, bit for bit (the same random draws too): the grid
    is 0.5 apart below 2, 1 apart below 4 and 2 apart up to 6, so dividing by the local spacing (a power of two:
    exact) and rounding half to even (`torch.round`) lands on the even code at every midpoint, as `cast_to_fp4x2`;
    stochastic rounding picks the grid value below or the one above with the same probability and the same draw.
    Training (`emulated`) needs only the values; this skips the code bookkeeping, the bulk of the cast's time."""
    magnitude = torch.nan_to_num(scaled.abs(), nan=E2M1_MAX).clamp(max=E2M1_MAX)
    spacing = (magnitude >= 2.0).float().add_(1.0).mul_((magnitude >= 4.0).float().add_(1.0)).mul_(0.5)  # .5, 1, 2
    if stochastic:
        lo = torch.floor(magnitude / spacing) * spacing
        hi = torch.clamp(lo + spacing, max=E2M1_MAX)
        gap = torch.where(hi > lo, hi - lo, torch.ones_like(hi))
        draw = torch.rand(magnitude.shape, generator=generator, dtype=torch.float32, device=magnitude.device)
        rounded = torch.where(draw < (magnitude - lo) / gap, hi, lo)
    else:
        rounded = torch.round(magnitude / spacing) * spacing
    return torch.copysign(rounded, torch.nan_to_num(scaled, nan=0.0))  # NaN: +6, as the codes; -0.0 keeps its sign


def fake_quantize_nvfp4(
    x: torch.Tensor,
    *,
    two_d: bool = False,
    stochastic_rounding: bool = False,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """`quantize_nvfp4(x, ...).dequantized` (float32, the input's shape) without the codes: what a GEMM operand
    becomes (client/collect/emulated.py)."""
    encoded = _encode(x, two_d, None)
    return _decoded(encoded, e2m1_rounded(encoded.scaled, stochastic=stochastic_rounding, generator=generator), x.shape)


def nvfp4_sums(x: torch.Tensor, q: Nvfp4Quantized) -> tuple[int, int, float]:
    """(numel, underflows, squared error) of one feed, as `LogNvfp4TensorStats` counts them."""
    underflows = int(x.count_nonzero().item()) - q.nonzero()
    square_error = float(F.mse_loss(x, q.dequantized.to(x.dtype), reduction="sum").item())
    return x.numel(), underflows, square_error
