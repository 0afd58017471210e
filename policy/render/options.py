"""What every dialect takes and returns: `RenderOptions` (shared knobs) and `RenderedPolicy` (one artifact).

Belongs here: these two records only. The dialect modules import them from here (not from the package
`__init__`, which imports the dialects), so the render package has no import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class RenderedPolicy:
    """One rendered artifact: its text, media type and a suggested file name."""

    content: str
    media_type: str
    filename: str


@dataclass(frozen=True, slots=True)
class RenderOptions:
    """Knobs shared by the renderers; the defaults follow the reference conventions.

    disable_features: "fp8" forces DisableFP8Layer/DisableFP8GEMM, "quantization" forces
        DisableQuantizationLayer/DisableQuantizationGEMM; None picks by `te_version` (>= 2.13 -> quantization).
    monitor_disabled: give skipped/overridden layers a high-precision LogTensorStats feature.
    stats_freq: logging frequency of the stats features.
    precision_config_file: file name the Megatron heredoc writes for `--te-precision-config-file`.
    pp_stage: the pipeline stage of a te-yaml / te-monitor file: needed when the logs name blocks per stage
        (policy/render/pipeline.py); refused by the other formats, which have one file for every stage.
    """

    disable_features: Literal["fp8", "quantization"] | None = None
    monitor_disabled: bool = True
    stats_freq: int = 10
    precision_config_file: str = "fp8_precision_config.yaml"
    pp_stage: int | None = None  # the pipeline stage a TE debug-API file is for (te-yaml, te-monitor)
