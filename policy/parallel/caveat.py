"""When a run's layer names cannot be trusted to name global blocks, the one sentence every view says about it.

Belongs here: `layout_caveat(info)`: None when the names are global (or the run is one model on one rank), else why
they may not be. The analysis puts it in its notes and every rendered format in its approximation line, so no view
claims exact placement on names that are not known to be global. Must not be here: deciding the layout (resolve.py).

Why it matters: Megatron-LM builds `TransformerBlock.layers` as a ModuleList indexed from 0 on every pipeline stage
(megatron/core/transformer/transformer_block.py, `_build_layers`); logs named by that index (not by `layer_number`)
repeat `decoder.layers.0` on every stage, so one name stands for a different block on each stage.
"""

from __future__ import annotations

from fp8_policy.policy.parallel.info import UNKNOWN, ParallelInfo
from fp8_policy.policy.parallel.naming import LOCAL


def layout_caveat(info: ParallelInfo | None) -> str | None:
    """Why the run's layer names may not name global blocks; None when they do (or nothing says otherwise)."""
    if info is None:
        return None
    if info.source == UNKNOWN:
        return (
            "the job's parallel layout is unknown (several ranks log the same layer names with different values): "
            "under pipeline parallelism with blocks numbered from 0 on every stage a layer name stands for a "
            "different block on each stage, so placement on global blocks is not assured; upload with the layout "
            "(tensor_model_parallel_size, pipeline_model_parallel_size, num_layers, ...) or record it with "
            "fp8_policy.record_parallel_layout()"
        )
    layout = info.layout
    if layout is None or layout.pp == 1:
        return None
    if info.naming is None:
        return (
            f"the stated layout ({layout.describe()}) does not explain the logged block numbers: layer names are "
            "kept as logged and may not name global blocks under pipeline parallelism"
        )
    if info.naming == LOCAL and layout.virtual_stages > 1:
        return (
            f"blocks are numbered per model chunk (from 0) under {layout.virtual_stages} virtual pipeline stages: "
            "the chunks of every stage log the same names, so a layer name stands for one block of every chunk"
        )
    return None
