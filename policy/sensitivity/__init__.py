"""Loss sensitivity: what casting each GEMM of each layer to each format is estimated to cost in loss.

The statistics (written by the CPU collector, `fp8_policy.collect` with `sensitivity=[...]`, and on a GPU by the TE
debug feature `LogQuantizationSensitivity` the project ships in client/collect/te_features/):

    <layer>_output_<prefix>_sensitivity   fprop
    <layer>_dgrad_<prefix>_sensitivity    dgrad
    <layer>_wgrad_<prefix>_sensitivity    wgrad

`<prefix>` is TE's recipe prefix: nvfp4, mxfp8, fp8_current_scaling, fp8_delayed_scaling, fp8_block_scaling. Values
are micro-nats (1e-6 nats) per logged step: fprop is the diagonal empirical-Fisher estimate of the loss increase
that the cast's output error causes (NVIDIA Model Optimizer `auto_quantize`'s gradient score,
`modelopt/torch/quantization/algorithms.py` `_get_auto_quantize_score`, times N/2 for a loss averaged over N
tokens); dgrad and wgrad are the relative error energy of the propagated and the weight gradient, counted as an
output error of the same relative size (the collector's `sensitivity` module has the formulas).

Modules: `table` (reading the series of a run into per layer x format x GEMM values), `judge` (what counts as high
or negligible: relative to the run's other layers at the same format). Pure: no I/O, no web or database imports.
"""

from fp8_policy.policy.sensitivity.judge import SensitivityJudge, SensitivityVerdict
from fp8_policy.policy.sensitivity.table import Sensitivity, read_sensitivity

__all__ = ["Sensitivity", "SensitivityJudge", "SensitivityVerdict", "read_sensitivity"]
