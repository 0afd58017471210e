"""Loss sensitivity of each GEMM of a linear layer to each candidate low-precision format, on CPU (or any device).

Belongs here: the per-feed numerators (`GemmErrors`), how feeds of one step combine into the logged values, the
stat names, and `SensitivityTap`, the hooks that feed them while a model trains. Must not be here: the casts
(`emulated`: the same fprop / dgrad / wgrad the emulated training runs), log files (`writer`).

What is logged, per layer, per GEMM and per candidate format `f` (nvfp4, mxfp8, current, delayed, block), once per
logged step (micro-batches summed), in micro-nats (1e-6 nats; nvdlfw_inspect writes values with 4 decimals):

    <layer>_output_<prefix>_sensitivity    fprop:  1/2 * N * sum((g * (y_f - y))^2)
    <layer>_dgrad_<prefix>_sensitivity     dgrad:  |dx_f - dx|^2 / |dx|^2 * 1/2 * N * sum((dx * x)^2)
    <layer>_wgrad_<prefix>_sensitivity     wgrad:  |dw_f - dw|^2 / |dw|^2 * 1/2 * N * sum((g * y)^2)

`<prefix>` is TE's recipe prefix (`nvfp4`, `mxfp8`, `fp8_current_scaling`, `fp8_delayed_scaling`,
`fp8_block_scaling`); `output`, `dgrad`, `wgrad` are TE's names of the three GEMM outputs. x is the GEMM input
(tokens x in), w the weight, y = x w^T, g = dL/dy the gradient the layer receives, dx = g w, dw = g^T x, and `_f`
the same GEMM with its operands cast as format f casts them (`emulated_fprop/dgrad/wgrad`); N is the number of rows
(tokens) of the step.
- fprop is the diagonal empirical-Fisher (second-order Taylor) estimate of the loss increase the output error
  causes: the score of NVIDIA Model Optimizer's `auto_quantize` (`modelopt/torch/quantization/algorithms.py`
  `_get_auto_quantize_score`: sum((grad_output * output_diff)^2)) times N/2, which turns the gradient of a loss
  averaged over N tokens back into per-token Fisher terms. It assumes the loss is the mean over the step's tokens
  (Megatron's and Hugging Face's language-model losses are).
- dgrad and wgrad: the relative error energy of the propagated gradient and of the weight gradient, counted as an
  output error of the same relative size on the GEMM they come from ("forward-equivalent"): scaled by the Fisher
  energy of the layer's input (dgrad) or output (wgrad), so a layer the loss barely depends on counts little.
  This is a modelling choice (the gradient error's effect on later steps is not simulated), stated with each use.
`delayed` is computed as `current` (no amax history here; the emulated training runs delayed as current too).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from fp8_policy.client.collect.emulated import emulated_dgrad, emulated_fprop, emulated_wgrad
from fp8_policy.client.collect.stats import TE_RECIPE_NAMES

SENSITIVITY_FORMATS = ("nvfp4", "mxfp8", "current", "delayed", "block")
GEMM_TENSORS = {"fprop": "output", "dgrad": "dgrad", "wgrad": "wgrad"}  # TE's names of the GEMM outputs
STAT = "sensitivity"
FEATURE = "LogQuantizationSensitivity"
MICRONATS = 1e6


def stat_name(layer: str, gemm: str, fmt: str) -> str:
    """`<layer>_<output|dgrad|wgrad>_<TE recipe prefix>_sensitivity` (module docstring)."""
    return f"{layer}_{GEMM_TENSORS[gemm]}_{TE_RECIPE_NAMES[fmt]}_{STAT}"


def check_formats(formats: Iterable[str]) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(formats))
    unknown = [f for f in chosen if f not in SENSITIVITY_FORMATS]
    if unknown:
        raise ValueError(f"sensitivity formats {unknown}: expected some of {', '.join(SENSITIVITY_FORMATS)}")
    return chosen


@dataclass(slots=True)
class GemmErrors:
    """Numerators of one or more feeds of one layer under one format; `values()` is what is logged."""

    rows: int = 0
    fprop_error: float = 0.0  # sum((g * dy_f)^2)
    output_fisher: float = 0.0  # sum((g * y)^2)
    input_fisher: float = 0.0  # sum((dx * x)^2)
    dgrad_error: float = 0.0  # |dx_f - dx|^2
    dgrad_energy: float = 0.0  # |dx|^2
    wgrad_error: float = 0.0  # |dw_f - dw|^2
    wgrad_energy: float = 0.0  # |dw|^2

    def add(self, other: GemmErrors) -> None:
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def values(self) -> dict[str, float]:
        """gemm -> logged value in micro-nats (module docstring); NaN where a feed carried NaN/inf."""
        half_n = 0.5 * self.rows * MICRONATS
        return {
            "fprop": half_n * self.fprop_error,
            "dgrad": half_n * self.input_fisher * _ratio(self.dgrad_error, self.dgrad_energy),
            "wgrad": half_n * self.output_fisher * _ratio(self.wgrad_error, self.wgrad_energy),
        }


def _ratio(error: float, energy: float) -> float:
    if energy > 0:
        return error / energy
    return 0.0 if error == 0 else float("inf")


def _sq(t: torch.Tensor) -> float:
    return float(t.double().square().sum())


def gemm_errors(
    x: torch.Tensor, w: torch.Tensor, g: torch.Tensor, fmt: str, generator: torch.Generator | None = None
) -> GemmErrors:
    """The numerators of one feed: `x` [tokens, in], `w` [out, in], `g` = dL/dy [tokens, out], all 2-D."""
    x, w, g = x.detach().float(), w.detach().float(), g.detach().float()
    y, dx, dw = x @ w.t(), g @ w, g.t() @ x
    return GemmErrors(
        rows=int(x.shape[0]),
        fprop_error=_sq(g * (emulated_fprop(x, w, fmt) - y)),
        output_fisher=_sq(g * y),
        input_fisher=_sq(dx * x),
        dgrad_error=_sq(emulated_dgrad(g, w, fmt, generator) - dx),
        dgrad_energy=_sq(dx),
        wgrad_error=_sq(emulated_wgrad(g, x, fmt, generator) - dw),
        wgrad_energy=_sq(dw),
    )


def layer_sensitivity(
    x: torch.Tensor, w: torch.Tensor, g: torch.Tensor, formats: Iterable[str], generator: torch.Generator | None = None
) -> dict[str, dict[str, float]]:
    """format -> gemm -> micro-nats for one feed (`x`, `g` of any leading shape; the last dim is the feature)."""
    x2, g2 = x.reshape(-1, x.shape[-1]), g.reshape(-1, g.shape[-1])
    return {fmt: gemm_errors(x2, w, g2, fmt, generator).values() for fmt in check_formats(formats)}


@dataclass(slots=True)
class SensitivityTap:
    """Hooks on linear layers that sum `GemmErrors` per (layer, format) over a step's micro-batches.

    `enabled()` says whether the current step is logged; `drain()` returns and clears the step's sums. The model's
    numerics are untouched: the casts run on detached copies, after the layer's gradient is known.
    """

    formats: tuple[str, ...]
    generator: torch.Generator
    enabled: Any  # () -> bool
    seconds: float = 0.0
    _sums: dict[tuple[str, str], GemmErrors] = field(default_factory=dict)
    _handles: list[Any] = field(default_factory=list)

    def attach(self, name: str, module: nn.Module) -> None:
        self._handles.append(
            module.register_forward_hook(lambda m, args, out, name=name: self._on_forward(name, m, args, out))
        )

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _on_forward(self, name: str, module: nn.Module, args: tuple[Any, ...], out: Any) -> None:
        if not (args and isinstance(args[0], torch.Tensor) and isinstance(out, torch.Tensor)):
            return
        if not (torch.is_grad_enabled() and out.requires_grad and self.enabled()):
            return
        x = args[0].detach()

        def on_gradient(grad: torch.Tensor) -> None:
            started = time.perf_counter()
            weight = module.weight
            assert isinstance(weight, torch.Tensor)
            x2, g2 = x.reshape(-1, x.shape[-1]), grad.reshape(-1, grad.shape[-1])
            for fmt in self.formats:
                errors = gemm_errors(x2, weight, g2, fmt, self.generator)
                self._sums.setdefault((name, fmt), GemmErrors()).add(errors)
            self.seconds += time.perf_counter() - started

        out.register_hook(on_gradient)  # type: ignore[no-untyped-call]  # torch leaves Tensor.register_hook untyped

    def drain(self) -> list[tuple[str, float]]:
        """(stat name, value) of every (layer, gemm, format) fed this step; the sums start again empty."""
        lines = [
            (stat_name(layer, gemm, fmt), value)
            for (layer, fmt), sums in self._sums.items()
            for gemm, value in sums.values().items()
        ]
        self._sums.clear()
        return lines

    def flush(self, writer: Any, iteration: int) -> float:
        """Write the step's values through `writer` (a `LogWriter`) at `iteration`, announcing the feature once per
        layer as TE's `inspect_tensor` message does; returns the seconds spent in the hooks and here."""
        started = time.perf_counter()
        for layer in dict.fromkeys(layer for layer, _ in self._sums):
            writer.inspect_tensor(layer, "output", [FEATURE])
        for name, value in self.drain():
            writer.scalar(name, value, iteration)
        spent, self.seconds = self.seconds + time.perf_counter() - started, 0.0
        return spent
