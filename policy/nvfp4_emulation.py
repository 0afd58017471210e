"""A NumPy emulation of Transformer Engine's NVFP4 quantization and of the two statistics LogNvfp4TensorStats logs.

Belongs here: the E2M1 / E4M3 casts, NVFP4 quantize-dequantize of one 2-D tensor, `nvfp4_underflows%` and
`nvfp4_mse` as TE defines them, and the tensor families the NVFP4 severity bands are derived from
(`derive_bands`, pinned by tests/policy/analysis/test_nvfp4_bands.py). Must not be here: reading logs, findings, I/O.

What is emulated (TE `transformer_engine/pytorch/custom_recipes/reference_nvfp4.py`,
`NVFP4QuantizerRef._quantize_blockwise_reference`, https://github.com/NVIDIA/TransformerEngine):
* one FP32 per-tensor scale: `global_encode = 448 * 6 / amax(x)` (1.0 when amax is 0);
* blocks of 16 consecutive elements along the last dimension (`tile=(1, 16)`), or 16x16 tiles (`tile=(16, 16)`,
  TE's 2-D weight quantization), each with a decode scale `block_amax * global_encode / 6` clamped to 448 and
  rounded to E4M3 (round to nearest even, subnormals from 2^-9);
* the encode scale `1 / (decode_e4m3 / global_encode)` (float32 max when the decode scale is 0), values scaled,
  clipped to +-6 and rounded to E2M1 {0, 0.5, 1, 1.5, 2, 3, 4, 6} with TE's tie rules (`cast_to_fp4x2`: 0.25 -> 0,
  0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4).
Not emulated: random Hadamard transforms and stochastic rounding (TE applies them to columnwise / gradient data;
LogNvfp4TensorStats reads the rowwise data, `utils/stats_computation.py`), `nvfp4_4over6` and row-scaled
activations.

Statistics (TE `debug/features/utils/stats_computation.py`): `nvfp4_underflows%` = (non-zeros of x minus non-zeros
of the FP4 data) / numel * 100 — a share of ALL elements, not of the non-zeros; `nvfp4_mse` = mean((x - dq)^2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

E2M1_GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)
E2M1_MAX = 6.0
E4M3_MAX = 448.0
BLOCK = 16
_F32_MAX = np.float32(np.finfo(np.float32).max)


def cast_e2m1(scaled: np.ndarray) -> np.ndarray:
    """Values already clipped to +-6 -> nearest E2M1 value, with TE's tie rules (sign kept, -0 counts as zero)."""
    a = np.abs(scaled)
    index = (a > 0.25).astype(np.int8) + (a >= 0.75) + (a > 1.25) + (a >= 1.75) + (a > 2.5) + (a >= 3.5) + (a > 5.0)
    out: np.ndarray = np.copysign(E2M1_GRID[index], scaled).astype(np.float32)
    return out


def cast_e4m3(values: np.ndarray) -> np.ndarray:
    """Non-negative float32 values (at most 448) rounded to FP8 E4M3: 3 mantissa bits, subnormal step 2^-9."""
    v = np.asarray(values, dtype=np.float32)
    with np.errstate(divide="ignore"):
        exponent = np.floor(np.log2(np.where(v > 0, v, 1.0)))
    step = np.exp2(np.maximum(exponent, -6.0) - 3.0).astype(np.float32)
    return np.minimum(np.round(v / step) * step, E4M3_MAX).astype(np.float32)


@dataclass(frozen=True, slots=True)
class Nvfp4Result:
    """One tensor quantized to NVFP4: the E2M1 codes' values, the dequantized tensor and the two statistics."""

    fp4: np.ndarray  # E2M1 values (before the scales), same shape as the input
    dequantized: np.ndarray
    underflows_pct: float
    mse: float


def quantize_nvfp4(x: np.ndarray, tile: tuple[int, int] = (1, BLOCK)) -> Nvfp4Result:
    """Quantize a 2-D tensor (last dimension a multiple of 16; rows a multiple of 16 for 16x16 tiles)."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] % BLOCK or (tile == (BLOCK, BLOCK) and x.shape[0] % BLOCK):
        raise ValueError(f"NVFP4 needs a 2-D tensor with dimensions divisible by 16 for tile {tile}, got {x.shape}")
    if tile not in ((1, BLOCK), (BLOCK, BLOCK)):
        raise ValueError(f"tile must be (1, 16) or (16, 16), got {tile}")
    m, n = x.shape
    amax = float(np.max(np.abs(x))) if x.size else 0.0
    global_encode = np.float32(E4M3_MAX * E2M1_MAX / amax) if amax > 0 else np.float32(1.0)
    global_decode = np.float32(1.0) / global_encode
    if tile == (1, BLOCK):
        blocks = x.reshape(m, n // BLOCK, BLOCK)
        block_amax = np.max(np.abs(blocks), axis=-1, keepdims=True)
    else:
        tiles = np.abs(x).reshape(m // BLOCK, BLOCK, n // BLOCK, BLOCK)
        tile_amax = tiles.max(axis=(1, 3))  # (m/16, n/16)
        block_amax = np.repeat(tile_amax, BLOCK, axis=0)[:, :, None]
        blocks = x.reshape(m, n // BLOCK, BLOCK)
    decode = cast_e4m3(np.minimum(block_amax * (global_encode / np.float32(E2M1_MAX)), E4M3_MAX))
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        encode = np.minimum(np.float32(1.0) / (decode * global_decode), _F32_MAX)
        scaled = np.clip(blocks * encode, -E2M1_MAX, E2M1_MAX)
    fp4 = cast_e2m1(scaled)
    dequantized = (fp4 * decode * global_decode).reshape(m, n).astype(np.float32)
    lost = int(np.count_nonzero(x)) - int(np.count_nonzero(fp4))
    mse = float(np.mean((x.astype(np.float64) - dequantized) ** 2)) if x.size else 0.0
    return Nvfp4Result(fp4.reshape(m, n), dequantized, 100.0 * lost / x.size if x.size else 0.0, mse)


def nvfp4_underflows_pct(x: np.ndarray, tile: tuple[int, int] = (1, BLOCK)) -> float:
    """TE's `nvfp4_underflows%` of one tensor."""
    return quantize_nvfp4(x, tile).underflows_pct


# --- the tensor families the bands are derived from ------------------------------------------------------------


def well_behaved(family: str, rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Tensors a healthy layer produces: `gaussian`, `laplace` (sharper peak, heavier tails) and `student_t4`
    (Student's t with 4 degrees of freedom: heavy tails). Wider per-element scale spreads (a Gaussian times
    exp(N(0, s)), s >= 1) lose 27 % and more of their values and are exactly what the bands must flag."""
    if family == "gaussian":
        return rng.standard_normal(shape)
    if family == "laplace":
        return rng.laplace(size=shape)
    if family == "student_t4":
        return rng.standard_t(4, size=shape)
    raise ValueError(f"unknown family {family!r}")


WELL_BEHAVED: tuple[str, ...] = ("gaussian", "laplace", "student_t4")


@dataclass(frozen=True, slots=True)
class DerivedBands:
    """NVFP4 underflow bands (percent of all elements) for one tile shape and the emulated levels behind them."""

    tile: tuple[int, int]
    levels: dict[str, float]  # family -> worst emulated nvfp4_underflows% over the draws
    warning: float
    critical: float
    severe: float


def derive_bands(
    tile: tuple[int, int] = (1, BLOCK), seeds: int = 4, shape: tuple[int, int] = (256, 1024)
) -> DerivedBands:
    """Emulate NVFP4 with `tile` on `seeds` draws of each well-behaved family and derive the bands (all rounded
    up to 0.5 percentage points):

    * warning = halfway between the Gaussian level and the heaviest well-behaved level: heavier-tailed inside its
      blocks than typical data;
    * critical = the heaviest well-behaved level: no healthy tensor shape loses more of its values;
    * severe = critical plus the heavy-tail excess (heaviest minus Gaussian) once more.
    """
    rng = np.random.default_rng(20261126)
    levels = {
        family: max(nvfp4_underflows_pct(well_behaved(family, rng, shape), tile) for _ in range(seeds))
        for family in WELL_BEHAVED
    }
    top, gaussian = max(levels.values()), levels["gaussian"]
    critical = _ceil_half(top)
    return DerivedBands(
        tile, levels, _ceil_half((gaussian + top) / 2.0), critical, _ceil_half(critical + top - gaussian)
    )


def _ceil_half(value: float) -> float:
    return float(np.ceil(value * 2.0) / 2.0)
