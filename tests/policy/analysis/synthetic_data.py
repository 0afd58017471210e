"""In-memory `RunData` of a `SyntheticRun`: the values `write_run` would write, without files or the parser.

Layers come from the run's GEMM layers (BF16 ones with High Precision plans and no stats), names are split by the
parser's own `split_metric_name`, so the analysis sees what an upload of the written tree would give it.
"""

from __future__ import annotations

import numpy as np

from fp8_policy.policy.names import layer_structure, split_metric_name
from fp8_policy.policy.records import LayerInfo, Precision, RunData, Series
from fp8_policy.policy.synthetic import SyntheticRun, stats_matrix


def run_data(run: SyntheticRun, metadata: dict[str, object] | None = None) -> RunData:
    names = [spec.name for spec in run.layers()]
    layers = {
        name: LayerInfo(
            name,
            layer_structure(name),
            Precision.HIGH if name in run.bf16_layers else Precision.FP8,
            has_fp8_stats=name not in run.bf16_layers,
        )
        for name in names
    }
    iterations = run.iteration_array()
    series: list[Series] = []
    for rank in range(run.ranks):
        cycle, values = stats_matrix(run, rank)
        for (layer, tensor, stat), row in zip(cycle, values, strict=True):
            metric = split_metric_name(f"{layer}_{tensor}_{stat}", names)
            assert metric is not None, (layer, tensor, stat)
            series.append(Series(rank, metric, iterations.copy(), np.round(row, 4)))
    return RunData(layers=layers, series=series, metadata=dict(metadata or {}))
