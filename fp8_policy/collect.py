"""`fp8_policy.collect`: FP8 statistics in Transformer Engine's log format, computed on CPU (the `[torch]` extra).

    from fp8_policy.collect import FP8StatsCollector, quantization_stats

The implementation lives in `fp8_policy.client.collect`; the names are resolved on first use (PEP 562), so
`import fp8_policy` and `import fp8_policy.collect` load neither torch nor torchao.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fp8_policy._lazy import lazy_attributes

_IMPL = "fp8_policy.client.collect"
__all__ = [
    "DEFAULT_STATS",
    "TENSORS",
    "DelayedScaler",
    "FP8StatsCollector",
    "Overhead",
    "QuantSums",
    "SENSITIVITY_FORMATS",
    "TensorSpec",
    "convert_to_emulated_training",
    "layer_sensitivity",
    "options_from_te_config",
    "parse_stat_name",
    "quantization_stats",
    "quantization_sums",
]

if TYPE_CHECKING:
    from fp8_policy.client.collect import (
        DEFAULT_STATS,
        SENSITIVITY_FORMATS,
        TENSORS,
        DelayedScaler,
        FP8StatsCollector,
        Overhead,
        QuantSums,
        TensorSpec,
        convert_to_emulated_training,
        layer_sensitivity,
        options_from_te_config,
        parse_stat_name,
        quantization_stats,
        quantization_sums,
    )


__getattr__, __dir__ = lazy_attributes(__name__, globals(), dict.fromkeys(__all__, _IMPL))
