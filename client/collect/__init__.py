"""FP8 statistics on CPU in Transformer Engine's format: `quantization_stats` and `FP8StatsCollector`.

Public entry point: `fp8_policy.collect` (re-exports these names, importing torch only when used). Needs the
`[torch]` extra (torch, torchao, nvdlfw-inspect). Client side: nothing here talks to the service.

Modules: `fp8` (formats, saturating cast, TE's scale and E8M0 arithmetic), `quantizers` (current/delayed
per-tensor, MXFP8, block scaling), `nvfp4` (NVFP4: E2M1, E4M3 block scales, tensor scale), `emulated` (training
with per-layer emulated precisions), `stats` (TE's statistic definitions, `quantization_stats`), `delayed`
(amax history), `sensitivity` (per-GEMM loss sensitivity to each format), `options` (TE YAML keys, schedule),
`naming` (nvdlfw_inspect layer names), `writer` (nvdlfw_inspect log files), `torchao_tap` (observing torchao's
casts), `collector` (the training-time collector).
"""

from fp8_policy.client.collect.collector import FP8StatsCollector
from fp8_policy.client.collect.delayed import DelayedScaler
from fp8_policy.client.collect.emulated import convert_to_emulated_training
from fp8_policy.client.collect.options import DEFAULT_STATS, TENSORS, TensorSpec, options_from_te_config
from fp8_policy.client.collect.sensitivity import SENSITIVITY_FORMATS, layer_sensitivity
from fp8_policy.client.collect.stats import QuantSums, parse_stat_name, quantization_stats, quantization_sums
from fp8_policy.client.collect.writer import Overhead

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
