"""Delayed scaling's state for one quantized tensor: the amax history and the scale it yields, step by step.

Belongs here: TE's amax-history update and scale computation. Must not be here: the cast (`quantizers`) or
statistics (`stats`).

Source: NVIDIA/TransformerEngine `transformer_engine/common/recipe/delayed_scaling.cu`
(`amax_and_scale_update_impl::kernel`): the history is rolled, `amax = max(history)` ("max") or the latest
amax ("most_recent"), `scale = fp8_max * 2^-margin / amax` when that amax is finite and positive, otherwise
the previous scale is kept; an infinite scale becomes FLT_MAX. Defaults from
`transformer_engine/common/recipe/__init__.py` `DelayedScaling`: margin 0, `amax_history_len=1024`,
`amax_compute_algo="max"`; the scale starts at 1.0. TE updates forward scales when an autocast region exits
and gradient scales after the backward pass; with one micro-batch per optimizer step that is once per step,
which is what `update()` does here (several micro-batches share the step's largest amax).
"""

from __future__ import annotations

import math
from collections import deque

import torch

from fp8_policy.client.collect.fp8 import FLT_MAX, Fp8Format, abs_ignoring_nan

AMAX_ALGOS = ("max", "most_recent")


class DelayedScaler:
    """Scale for the next cast of one tensor: feed `observe(x)` for every cast, call `update()` once per step."""

    def __init__(
        self, fmt: Fp8Format, *, history_len: int = 1024, margin: int = 0, amax_compute_algo: str = "max"
    ) -> None:
        if history_len < 1:
            raise ValueError(f"amax_history_len must be >= 1, got {history_len}")
        if amax_compute_algo not in AMAX_ALGOS:
            raise ValueError(f"amax_compute_algo must be one of {', '.join(AMAX_ALGOS)}, got {amax_compute_algo!r}")
        self.fmt = fmt
        self.scaled_max = fmt.max * 2.0**-margin
        self.algo = amax_compute_algo
        self.history: deque[float] = deque(maxlen=history_len)
        self.scale = torch.ones((), dtype=torch.float32)
        self._step_amax: float | None = None

    def observe(self, x: torch.Tensor) -> None:
        """Record the amax of a tensor cast with the current scale (NaN ignored, as CUDA's fmaxf does)."""
        amax = float(abs_ignoring_nan(x).max()) if x.numel() else 0.0
        self._step_amax = amax if self._step_amax is None else max(self._step_amax, amax)

    def update(self) -> None:
        """End of step: push the step's amax into the history and recompute the scale (no-op without casts)."""
        if self._step_amax is None:
            return
        self.history.append(self._step_amax)
        self._step_amax = None
        amax = max(self.history) if self.algo == "max" else self.history[-1]
        if math.isfinite(amax) and amax > 0:
            scale = torch.tensor(self.scaled_max, dtype=torch.float32) / torch.tensor(amax, dtype=torch.float32)
            if math.isinf(float(scale)):
                scale = torch.tensor(FLT_MAX, dtype=torch.float32)
            self.scale = scale
