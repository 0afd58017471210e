"""Render a `PolicyDecision` in the dialects users paste into their training setup.

Belongs here: the public entry points `render(decision, fmt)` / `applied(decision, fmt)` and the one table
of formats (`DIALECTS`; `FORMATS` is its keys) plus the monitoring-only formats (`MONITORS`: `te-monitor`, a
debug YAML that applies nothing; `OUTPUT_FORMATS` is every format `render` takes). Each dialect lives in its own module (`te_yaml`, `megatron`, `hydra`, `torchao`, `te_recipe`, `torchtitan`)
with a `render(decision, options)` and an `applied(decision)` (what that dialect really keeps in BF16, see
`applied`); the records are in `options`, shared layer facts in `layout`, exact-name regexes in `regex`.
Must not be here: analysis or recommendation logic, I/O, web or database imports.
"""

from __future__ import annotations

from typing import Any, Protocol

from fp8_policy.policy.records import PolicyDecision
from fp8_policy.policy.render import hydra, megatron, pipeline, te_monitor, te_recipe, te_yaml, torchao, torchtitan
from fp8_policy.policy.render.applied import AppliedPolicy
from fp8_policy.policy.render.options import RenderedPolicy, RenderOptions


class Dialect(Protocol):
    """What a dialect module provides (modules satisfy a Protocol structurally)."""

    def render(self, decision: PolicyDecision, options: RenderOptions) -> RenderedPolicy: ...

    def applied(self, decision: PolicyDecision) -> AppliedPolicy: ...


# format -> dialect module
DIALECTS: dict[str, Dialect] = {
    "te-yaml": te_yaml,
    "megatron": megatron,
    "hydra": hydra,
    "torchao": torchao,
    "te-recipe": te_recipe,
    "torchtitan": torchtitan,
}
FORMATS: tuple[str, ...] = tuple(DIALECTS)


class Monitor(Protocol):
    """A format that watches an applied policy and applies nothing (no `applied`)."""

    def render(self, decision: PolicyDecision, options: RenderOptions) -> RenderedPolicy: ...


# format -> monitoring module (not in FORMATS: they keep nothing in BF16 themselves)
MONITORS: dict[str, Monitor] = {"te-monitor": te_monitor}
OUTPUT_FORMATS: tuple[str, ...] = (*FORMATS, *MONITORS)


def render(decision: PolicyDecision, fmt: str, options: RenderOptions | None = None) -> RenderedPolicy:
    """Render `decision` as `fmt` (one of OUTPUT_FORMATS)."""
    module = DIALECTS.get(fmt) or MONITORS.get(fmt)
    if module is None:
        raise ValueError(f"unknown policy format {fmt!r}; expected one of {', '.join(OUTPUT_FORMATS)}")
    options = options or RenderOptions()
    if options.pp_stage is not None and fmt not in pipeline.STAGED_FORMATS:
        raise pipeline.InvalidPipelineStage(
            f"pp_stage applies to {' and '.join(pipeline.STAGED_FORMATS)}; {fmt} is one file for every pipeline stage"
        )
    return module.render(decision, options)


def applied(decision: PolicyDecision, fmt: str) -> AppliedPolicy:
    """What `fmt` really keeps in BF16 for `decision` (see `applied.py`)."""
    if fmt not in DIALECTS:
        raise ValueError(f"unknown policy format {fmt!r}; expected one of {', '.join(FORMATS)}")
    return DIALECTS[fmt].applied(decision)


def applied_by_format(decision: PolicyDecision) -> dict[str, dict[str, Any]]:
    """The JSON recommendation's `formats` section: per format, the BF16 set it applies and what it approximated."""
    return {fmt: applied(decision, fmt).to_dict(decision) for fmt in FORMATS}


__all__ = [
    "DIALECTS",
    "FORMATS",
    "MONITORS",
    "OUTPUT_FORMATS",
    "AppliedPolicy",
    "RenderOptions",
    "RenderedPolicy",
    "applied",
    "applied_by_format",
    "render",
]
