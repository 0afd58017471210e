"""Render a `PolicyDecision` in the dialects users paste into their training setup.

Belongs here: the public entry point `render(decision, fmt)`, the list of formats, the result record
and the render options. Each dialect lives in its own module (`te_yaml`, `megatron`, `hydra`,
`torchao`); shared layer facts are in `layout`, exact-name regexes in `regex`.
Must not be here: analysis or recommendation logic, I/O, web or database imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fp8_policy.policy.records import PolicyDecision

FORMATS: tuple[str, ...] = ("te-yaml", "megatron", "hydra", "torchao")


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
    """

    disable_features: Literal["fp8", "quantization"] | None = None
    monitor_disabled: bool = True
    stats_freq: int = 10
    precision_config_file: str = "fp8_precision_config.yaml"


def render(
    decision: PolicyDecision, fmt: str, options: RenderOptions | None = None
) -> RenderedPolicy:
    """Render `decision` as `fmt` (one of FORMATS)."""
    from fp8_policy.policy.render import hydra, megatron, te_yaml, torchao

    renderers = {
        "te-yaml": te_yaml.render,
        "megatron": megatron.render,
        "hydra": hydra.render,
        "torchao": torchao.render,
    }
    if fmt not in renderers:
        raise ValueError(f"unknown policy format {fmt!r}; expected one of {', '.join(FORMATS)}")
    return renderers[fmt](decision, options or RenderOptions())


__all__ = ["FORMATS", "RenderOptions", "RenderedPolicy", "render"]
