"""The logic of the TE debug feature `LogQuantizationSensitivity` (client/collect/te_features/), without TE.

    import nvdlfw_inspect.api as debug_api
    from fp8_policy.client.collect.te_sensitivity import TE_FEATURE_DIR
    debug_api.initialize("sensitivity.yaml", feature_dirs=[te_debug_features_dir, TE_FEATURE_DIR], log_dir=...)

`TE_FEATURE_DIR` is a folder of feature files, not a package: nvdlfw_inspect executes every `.py` file under a
feature dir, and `te_features/log_quantization_sensitivity.py` imports TE, which only a TE session has.

Belongs here: the feature's YAML keys and their checks, its schedule, and what it does with the tensors TE hands
to `inspect_tensor` (keep a layer's activation and weight from the forward, and when its gradient comes in the
backward compute `sensitivity.gemm_errors` for every format; sum a step's micro-batches; write the step's lines
when the next step starts, through nvdlfw_inspect's `MetricLogger`, the same names as the CPU collector). Must not
be here: anything importing transformer_engine (the feature file only adds TE's base class and registration).

    log_sensitivity:
      enabled: True
      layers: {layer_types: [qkv, proj, fc1, fc2]}
      transformer_engine:
        LogQuantizationSensitivity: {enabled: True, formats: [nvfp4, mxfp8, current], freq: 100}

Keys: `enabled`, `formats` (nvfp4, mxfp8, current, delayed, block; default all), `freq`, `start_step`, `end_step`,
`start_end_list` (TE's schedule keys, `transformer_engine/debug/features/utils/__init__.py` `next_enabled_iter`);
anything else raises, as TE's own features do. The tensors it needs (activation, weight, gradient) are implied.

Unverified on a GPU (none was available): written against TE 2.20's `inspect_tensor` call (the high-precision
`tensor` of activation / weight in the forward and gradient in the backward; `transformer_engine/debug/pytorch/
debug_quantization.py`). Known limits: the last logged step is written only if another step follows (call
`flush()` at the end); micro-batches are paired first-in first-out (1F1B pipelines keep that order); under tensor
parallelism each rank logs its own shard's share.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fp8_policy.client.collect.options import TensorSpec
from fp8_policy.client.collect.sensitivity import FEATURE, SENSITIVITY_FORMATS, GemmErrors, gemm_errors, stat_name

TE_FEATURE_DIR = str(Path(__file__).resolve().parent / "te_features")
INPUTS = ("activation", "weight", "gradient")
KEYS = frozenset({"enabled", "formats", "freq", "start_step", "end_step", "start_end_list", "tensor"})


def parse_config(config: Mapping[str, Any], tensor_name: str) -> dict[str, Any] | None:
    """The feature's config for `tensor_name` (None for a tensor it does not read); ValueError for a bad key."""
    unknown = sorted(set(config) - KEYS)
    if unknown:
        raise ValueError(f"{FEATURE}: unknown keys {unknown}; expected {sorted(KEYS - {'tensor'})}")
    formats = config.get("formats", list(SENSITIVITY_FORMATS))
    if not isinstance(formats, list) or not formats or any(f not in SENSITIVITY_FORMATS for f in formats):
        raise ValueError(f"{FEATURE}: formats must be a non-empty list of {', '.join(SENSITIVITY_FORMATS)}")
    schedule(config)  # raises on a bad freq
    if tensor_name not in INPUTS:
        return None
    return {k: v for k, v in config.items() if k != "enabled"} | {"formats": list(formats), "tensor": tensor_name}


def schedule(config: Mapping[str, Any]) -> TensorSpec:
    intervals = config.get("start_end_list")
    return TensorSpec(
        "activation",
        ("sensitivity",),
        int(config.get("freq", 1)),
        config.get("start_step"),
        config.get("end_step"),
        tuple((int(a), int(b)) for a, b in intervals) if intervals else None,
    )


@dataclass
class _Pending:
    activations: deque[torch.Tensor] = field(default_factory=deque)
    weight: torch.Tensor | None = None


class SensitivityFeatureCore:
    """State and behaviour of the feature for one process (TE creates one feature object per process)."""

    def __init__(self, log_scalar: Callable[[str, float, int], None] | None = None, seed: int = 0) -> None:
        self._log_scalar = log_scalar
        self._seed = seed
        self._generators: dict[torch.device, torch.Generator] = {}
        self._pending: dict[str, _Pending] = {}
        self._sums: dict[tuple[str, str], GemmErrors] = {}
        self._iteration: int | None = None

    def enabled(self, config: Mapping[str, Any], iteration: int) -> bool:
        return schedule(config).enabled(iteration)

    def feed(self, config: Mapping[str, Any], layer: str, tensor_name: str, iteration: int, tensor: Any) -> None:
        if self._iteration is not None and iteration != self._iteration:
            self.flush()
        self._iteration = iteration
        if not isinstance(tensor, torch.Tensor):
            return
        pending = self._pending.setdefault(layer, _Pending())
        if tensor_name == "activation":
            pending.activations.append(tensor.detach())
        elif tensor_name == "weight":
            pending.weight = tensor.detach()
        elif tensor_name == "gradient" and pending.activations and pending.weight is not None:
            x = pending.activations.popleft()
            x2, g2 = x.reshape(-1, x.shape[-1]), tensor.detach().reshape(-1, tensor.shape[-1])
            for fmt in config.get("formats", SENSITIVITY_FORMATS):
                errors = gemm_errors(x2, pending.weight, g2, fmt, self._generator(tensor.device))
                self._sums.setdefault((layer, fmt), GemmErrors()).add(errors)

    def _generator(self, device: torch.device) -> torch.Generator:
        if device not in self._generators:
            self._generators[device] = torch.Generator(device=device).manual_seed(self._seed)
        return self._generators[device]

    def flush(self) -> list[tuple[str, float, int]]:
        """Write (and return) the buffered step's lines; nothing when no step is buffered."""
        lines = [
            (stat_name(layer, gemm, fmt), value, self._iteration or 0)
            for (layer, fmt), sums in self._sums.items()
            for gemm, value in sums.values().items()
        ]
        log = self._log_scalar or _metric_logger()
        for name, value, iteration in lines:
            log(name, value, iteration)
        self._sums.clear()
        self._pending.clear()
        return lines


def _metric_logger() -> Callable[[str, float, int], None]:
    from nvdlfw_inspect.logging import MetricLogger

    return MetricLogger.log_scalar  # type: ignore[no-any-return]
