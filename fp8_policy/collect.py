"""`fp8_policy.collect`: FP8 statistics in Transformer Engine's log format, computed on CPU (the `[torch]` extra).

    from fp8_policy.collect import FP8StatsCollector, quantization_stats

The implementation lives in `fp8_policy.client.collect`; the names are resolved on first use (PEP 562), so
`import fp8_policy` and `import fp8_policy.collect` load neither torch nor torchao.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_IMPL = "fp8_policy.client.collect"
__all__ = [
    "DEFAULT_STATS",
    "TENSORS",
    "DelayedScaler",
    "FP8StatsCollector",
    "Overhead",
    "QuantSums",
    "TensorSpec",
    "convert_to_emulated_training",
    "options_from_te_config",
    "parse_stat_name",
    "quantization_stats",
    "quantization_sums",
]

if TYPE_CHECKING:
    from fp8_policy.client.collect import (
        DEFAULT_STATS,
        TENSORS,
        DelayedScaler,
        FP8StatsCollector,
        Overhead,
        QuantSums,
        TensorSpec,
        convert_to_emulated_training,
        options_from_te_config,
        parse_stat_name,
        quantization_stats,
        quantization_sums,
    )


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'fp8_policy.collect' has no attribute {name!r}")
    value = getattr(importlib.import_module(_IMPL), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
