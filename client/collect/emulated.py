"""Training in emulated low precision on CPU, one precision per layer: NVFP4, MXFP8, FP8 block, FP8 current, BF16.

Belongs here: `EmulatedLinear` (an `nn.Linear` whose three GEMMs see fake-quantized operands) and
`convert_to_emulated_training`, which swaps a model's linears for it by nvdlfw_inspect layer name. Must not be
here: the quantizers themselves (`nvfp4`, `quantizers`) or statistics (`collector`).

What each GEMM sees, as TE 2.20's recipes quantize (`transformer_engine/common/recipe/__init__.py`,
`pytorch/module/linear.py`): fprop `y = Q(x) Q(w)^T`, dgrad `dx = Q(dy) Q(w)`, wgrad `dw = Q(dy^T) Q(x^T)` where the
wgrad operands are the columnwise copies (blocks along the token dimension).
- `nvfp4` (`NVFP4BlockScaling` defaults): 1x16 blocks for x and dy, 16x16 tiles for w, stochastic rounding of dy,
  and the 16-point random Hadamard transform (TE's fixed sign vector, `quantization_nvfp4.py`
  `get_wgrad_sign_vector`) on both wgrad operands before they are quantized (orthogonal: it cancels in the
  product, and only the quantization error changes).
- `mxfp8` (`MXFP8BlockScaling`, E4M3 for every tensor): 32-element E8M0-scaled blocks, rowwise and columnwise.
- `block` (`Float8BlockScaling`): 1x128 tiles for x and dy, 128x128 for w; E4M3 forward, E5M2 gradients.
- `current` (`Float8CurrentScaling(HYBRID)`): one scale per tensor; E4M3 forward, E5M2 gradients. `delayed` is run
  as `current` (no amax history here): the ladder ranks them together.
- `bf16`: the operands are used as they are (float32 on CPU stands in for BF16, as in the FP8 closed loop).
The GEMMs themselves run in float32 on the dequantized values (TE accumulates in FP32 too).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from fp8_policy.client.collect.fp8 import E4M3, E5M2
from fp8_policy.client.collect.naming import assigned_names, gemm_layers
from fp8_policy.client.collect.nvfp4 import NVFP4_BLOCK, fake_quantize_nvfp4
from fp8_policy.client.collect.quantizers import quantize_block, quantize_current, quantize_mxfp8

PRECISIONS = ("nvfp4", "mxfp8", "block", "current", "delayed", "bf16")
GEMMS = ("fprop", "dgrad", "wgrad")
_RHT_SIGNS = (1.0, 1.0, 1.0, -1.0, 1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 1.0, -1.0, 1.0, -1.0, -1.0)


def hadamard_16() -> torch.Tensor:
    """TE's 16x16 random Hadamard transform: sign-flipped Sylvester matrix scaled by 1/4 (orthogonal)."""
    h = torch.ones(1, 1)
    while h.shape[0] < NVFP4_BLOCK:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return torch.diag(torch.tensor(_RHT_SIGNS)) @ h / 4.0


def _rht_last_dim(x: torch.Tensor) -> torch.Tensor:
    pad = (-x.shape[-1]) % NVFP4_BLOCK
    padded = F.pad(x, (0, pad)) if pad else x
    blocks = padded.reshape(*padded.shape[:-1], -1, NVFP4_BLOCK) @ hadamard_16().to(x.device, x.dtype)
    return blocks.reshape(padded.shape)


def fake_quantize(
    x: torch.Tensor, precision: str, role: str, *, generator: torch.Generator | None = None
) -> torch.Tensor:
    """`x` (2-D) quantized and dequantized as `precision` treats the GEMM operand `role`.

    `role`: "input", "weight" or "grad" for the rowwise copies; quantization runs along the last dim, so pass
    the transpose for a columnwise copy.
    """
    if precision == "bf16":
        return x
    gradient = role == "grad"
    if precision == "nvfp4":
        dequantized = fake_quantize_nvfp4(x, two_d=role == "weight", stochastic_rounding=gradient, generator=generator)
        return dequantized.to(x.dtype)
    if precision == "mxfp8":
        return quantize_mxfp8(x, E4M3).dequantized
    fmt = E5M2 if gradient else E4M3
    if precision == "block":
        return quantize_block(x, fmt, block_dims=2 if role == "weight" else 1).dequantized
    if precision in ("current", "delayed"):
        return quantize_current(x, fmt).dequantized
    raise ValueError(f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}")


def emulated_fprop(x: torch.Tensor, w: torch.Tensor, precision: str) -> torch.Tensor:
    """fprop `y = Q(x) Q(w)^T` on 2-D `x` [tokens, in] and `w` [out, in] (module docstring)."""
    return fake_quantize(x, precision, "input") @ fake_quantize(w, precision, "weight").t()


def emulated_dgrad(
    dy: torch.Tensor, w: torch.Tensor, precision: str, generator: torch.Generator | None = None
) -> torch.Tensor:
    """dgrad `dx = Q(dy) Q(w)` with the weight's columnwise copy (blocks along `out`)."""
    w_col = fake_quantize(w.t().contiguous(), precision, "weight").t()
    return fake_quantize(dy.contiguous(), precision, "grad", generator=generator) @ w_col


def emulated_wgrad(
    dy: torch.Tensor, x: torch.Tensor, precision: str, generator: torch.Generator | None = None
) -> torch.Tensor:
    """wgrad `dw = Q(dy^T) Q(x^T)^T` on the columnwise copies (blocks along tokens; RHT first under NVFP4)."""
    dy_t, x_t = dy.t().contiguous(), x.t().contiguous()
    if precision == "nvfp4":  # RHT over the token dimension of both wgrad operands
        dy_t, x_t = _rht_last_dim(dy_t), _rht_last_dim(x_t)
    return fake_quantize(dy_t, precision, "grad", generator=generator) @ fake_quantize(x_t, precision, "input").t()


class _EmulatedMatmul(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, w: torch.Tensor, precisions: tuple[str, ...], generator: Any
    ) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        ctx.precisions, ctx.generator = precisions, generator
        return emulated_fprop(x, w, precisions[0])

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None, None]:
        x, w = ctx.saved_tensors
        (_fprop, dgrad, wgrad), generator = ctx.precisions, ctx.generator
        dx = emulated_dgrad(dy, w, dgrad, generator)
        return dx, emulated_wgrad(dy.contiguous(), x, wgrad, generator), None, None


class EmulatedLinear(nn.Linear):
    """`nn.Linear` whose GEMMs run on operands fake-quantized as `precision` (see the module docstring); GEMMs named
    in `bf16_gemms` (fprop, dgrad, wgrad) run in high precision instead, as a TE GEMM override does."""

    precision: str = "bf16"
    bf16_gemms: frozenset[str] = frozenset()
    generator: torch.Generator | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        precisions = tuple("bf16" if g in self.bf16_gemms else self.precision for g in GEMMS)
        if set(precisions) == {"bf16"}:
            return F.linear(x, self.weight, self.bias)
        x2d = x.reshape(-1, x.shape[-1])
        y: torch.Tensor = _EmulatedMatmul.apply(  # type: ignore[no-untyped-call]  # torch leaves apply untyped
            x2d, self.weight, precisions, self.generator
        )
        y = y.reshape(*x.shape[:-1], self.out_features)
        return y + self.bias if self.bias is not None else y


def convert_to_emulated_training(
    model: nn.Module,
    precisions: Mapping[str, str] | None = None,
    *,
    default: str = "nvfp4",
    seed: int = 0,
    bf16_gemms: Mapping[str, Iterable[str]] | None = None,
) -> dict[str, str]:
    """Turn every `nn.Linear` of `model` into an `EmulatedLinear`, in place; returns {layer name: precision}.

    Layer names are nvdlfw_inspect's (`model.decoder.layers.1.mlp.linear_fc1`), as logs and recommendations
    spell them; `precisions` maps some of them to a precision, the rest get `default`; `bf16_gemms` maps some to
    the GEMMs (fprop, dgrad, wgrad) they run in high precision (a recommendation's `gemm_overrides`). Parameters are
    kept (same tensors), so an optimizer built before or after sees the same ones. A name that is no linear layer
    of the model raises, so a recommendation for another model cannot be applied silently.
    """
    precisions = dict(precisions or {})
    overrides = {name: frozenset(gemms) for name, gemms in (bf16_gemms or {}).items()}
    for precision in [default, *precisions.values()]:
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
    if any(not gemms <= set(GEMMS) for gemms in overrides.values()):
        raise ValueError(f"bf16_gemms: GEMMs are {', '.join(GEMMS)}")
    layers = gemm_layers(assigned_names(model))
    unknown = sorted((set(precisions) | set(overrides)) - set(layers))
    if unknown:
        raise ValueError(f"no linear layer named {', '.join(unknown)} in the model")
    generator = torch.Generator().manual_seed(seed)
    applied = {}
    for name, module in layers.items():
        if type(module) not in (nn.Linear, EmulatedLinear):
            raise TypeError(f"{name} is a {type(module).__name__}, not a plain nn.Linear")
        module.__class__ = EmulatedLinear  # same parameters and hooks; only forward changes
        emulated = cast(EmulatedLinear, module)
        emulated.precision = precisions.get(name, default)
        emulated.bf16_gemms = overrides.get(name, frozenset())
        emulated.generator = generator
        applied[name] = emulated.precision
    return applied
