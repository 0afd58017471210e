"""`LogQuantizationSensitivity`: per-layer, per-GEMM loss sensitivity to each low-precision format, as a TE debug
feature (loaded by nvdlfw_inspect from `feature_dirs`: `fp8_policy.client.collect.te_sensitivity.TE_FEATURE_DIR`).

It writes the lines the CPU collector writes (`<layer>_<output|dgrad|wgrad>_<prefix>_sensitivity`, micro-nats;
client/collect/sensitivity.py has the formulas), computed on the GPU from the high-precision tensors TE passes to
`inspect_tensor`; YAML keys, schedule and limits: client/collect/te_sensitivity.py. UNVERIFIED: written against TE
2.20's feature API (`transformer_engine/debug/features/dump_tensors.py` is the pattern: `TEConfigAPIMapper`,
`@api_method inspect_tensor_enabled / inspect_tensor`, `next_enabled_iter`) but not yet run on a GPU.
"""

from __future__ import annotations

from typing import Any

import nvdlfw_inspect.api as debug_api
from nvdlfw_inspect.registry import Registry, api_method
from transformer_engine.debug.features.api import TEConfigAPIMapper
from transformer_engine.debug.features.utils import next_enabled_iter

from fp8_policy.client.collect.sensitivity import FEATURE
from fp8_policy.client.collect.te_sensitivity import SensitivityFeatureCore, parse_config


@Registry.register_feature(namespace="transformer_engine")
class LogQuantizationSensitivity(TEConfigAPIMapper):  # type: ignore[misc]  # TE's base class is untyped
    """Loss sensitivity of fprop / dgrad / wgrad to nvfp4, mxfp8, current, delayed and block casts."""

    def __init__(self) -> None:
        super().__init__()
        self.core = SensitivityFeatureCore()
        self._announced: set[tuple[str, str]] = set()

    def parse_config_and_api(self, config: dict[str, Any], **kwargs: Any) -> tuple[bool, dict[str, Any] | None]:
        if kwargs.get("gemm_parsing"):
            return False, None  # no GEMM-level API: the feature only inspects tensors
        parsed = parse_config(config, kwargs.get("tensor_name", ""))
        return parsed is not None, parsed

    @api_method  # type: ignore[untyped-decorator]  # nvdlfw_inspect is untyped
    def inspect_tensor_enabled(
        self, config: dict[str, Any], layer_name: str, tensor_name: str, iteration: int
    ) -> tuple[bool, int | None]:
        return next_enabled_iter(  # type: ignore[no-any-return]
            config.get("start_step"),
            config.get("end_step"),
            config.get("start_end_list"),
            config.get("freq", 1),
            iteration,
        )

    @api_method  # type: ignore[untyped-decorator]  # nvdlfw_inspect is untyped
    def inspect_tensor(
        self,
        config: dict[str, Any],
        layer_name: str,
        tensor_name: str,
        iteration: int,
        tp_group: Any = None,
        tensor: Any = None,
        **_quantized: Any,
    ) -> None:
        if (layer_name, tensor_name) not in self._announced:
            self._announced.add((layer_name, tensor_name))
            debug_api.log_message(f"Feature={FEATURE}, API=inspect_tensor: {tensor_name}", layer_name)
        self.core.feed(config, layer_name, tensor_name, iteration, tensor)
