"""Small RunData builders for TE 2.20 runs (NVFP4, MXFP8, block what-ifs): any stat key per (layer, tensor).

`frontier_run(values)` builds a Megatron-named model of `n_blocks` blocks x 4 GEMM layers with plan lines saying
every layer is quantized; `values(layer, block, sub, tensor, stat_key, rng)` returns the logged values of one series
(None: not logged). Values are rounded to 4 decimals like the log; iterations 0, 10, ..., 10 * (n - 1).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fp8_policy.policy.names import layer_structure, split_metric_name
from fp8_policy.policy.records import QUANTIZED_TENSORS, LayerInfo, MetricName, Precision, RunData, Series

SUBS = ("self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2")
Values = Callable[[str, int, str, str, str, np.random.Generator], "np.ndarray | float | None"]


def layer_name(block: int, sub: str) -> str:
    return f"model.module.decoder.layers.{block}.{sub}"


def frontier_run(
    values: Values,
    stat_keys: tuple[str, ...],
    *,
    n_blocks: int = 8,
    n_points: int = 40,
    metadata: dict[str, object] | None = None,
    seed: int = 0,
    precision: Precision = Precision.FP8,
) -> RunData:
    rng = np.random.default_rng(seed)
    iterations = np.arange(n_points, dtype=np.int64) * 10
    layers: dict[str, LayerInfo] = {}
    series: list[Series] = []
    for block in range(n_blocks):
        for sub in SUBS:
            layer = layer_name(block, sub)
            logged = False
            for tensor in QUANTIZED_TENSORS:
                for key in stat_keys:
                    value = values(layer, block, sub, tensor, key, rng)
                    if value is None:
                        continue
                    array = np.round(np.broadcast_to(np.asarray(value, dtype=np.float64), (n_points,)), 4)
                    series.append(Series(0, _metric(layer, tensor, key), iterations, array))
                    logged = True
            layers[layer] = LayerInfo(layer, layer_structure(layer), precision, has_fp8_stats=logged)
    return RunData(layers=layers, series=series, metadata=dict(metadata or {}))


def _metric(layer: str, tensor: str, key: str) -> MetricName:
    metric = split_metric_name(f"{layer}_{tensor}_{key}")
    assert metric is not None and metric.layer == layer, key
    return metric


def noisy(level: float, rng: np.random.Generator, n: int = 40, sigma: float = 0.03) -> np.ndarray:
    return level * rng.lognormal(0.0, sigma, n)
