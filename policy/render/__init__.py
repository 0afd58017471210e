"""Render a `PolicyDecision` in the dialects users paste into their training setup.

Belongs here: the public entry points `render(decision, fmt)` / `applied(decision, fmt)` and the table of the
dialects that apply a policy (`DIALECTS`) and of the monitoring-only formats (`MONITORS`: `te-monitor`, a debug
YAML that applies nothing), both keyed by the formats policy/vocabulary.py names (`FORMATS`, `MONITORS`;
`OUTPUT_FORMATS` is every format `render` takes): a format's module is the one named like it (`te-yaml` ->
te_yaml.py). Each dialect lives in its own module (`te_yaml`, `megatron`, `hydra`, `torchao`, `te_recipe`,
`torchtitan`) with a `render(decision, options)` and an `applied(decision)` (what that dialect really keeps in
BF16, see `applied`); the records are in `options`, shared layer facts in `layout`, exact-name regexes in `regex`.
Must not be here: analysis or recommendation logic, I/O, web or database imports.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from fp8_policy.policy import vocabulary
from fp8_policy.policy.records import PolicyDecision
from fp8_policy.policy.render import hydra, megatron, pipeline, te_monitor, te_recipe, te_yaml, torchao, torchtitan
from fp8_policy.policy.render.applied import AppliedPolicy
from fp8_policy.policy.render.options import RenderedPolicy, RenderOptions


class Dialect(Protocol):
    """What a dialect module provides (modules satisfy a Protocol structurally)."""

    __name__: str

    def render(self, decision: PolicyDecision, options: RenderOptions) -> RenderedPolicy: ...

    def applied(self, decision: PolicyDecision) -> AppliedPolicy: ...


class Monitor(Protocol):
    """A format that watches an applied policy and applies nothing (no `applied`)."""

    __name__: str

    def render(self, decision: PolicyDecision, options: RenderOptions) -> RenderedPolicy: ...


_T = TypeVar("_T", Dialect, Monitor)


def _by_format(formats: tuple[str, ...], modules: tuple[_T, ...]) -> dict[str, _T]:
    """format -> the module of `modules` named like it (`te-yaml` -> te_yaml), for every format of `formats`, in
    that order; a format without its module, or a module without its format, fails at import."""
    named = {module.__name__.rpartition(".")[2]: module for module in modules}
    wanted = {fmt: fmt.replace("-", "_") for fmt in formats}
    if sorted(wanted.values()) != sorted(named):
        raise ImportError(f"policy/render/ modules {sorted(named)} are not the formats {list(formats)} (vocabulary.py)")
    return {fmt: named[name] for fmt, name in wanted.items()}


# format -> dialect module, keyed by the vocabulary's list
_DIALECT_MODULES: tuple[Dialect, ...] = (te_yaml, megatron, hydra, torchao, te_recipe, torchtitan)
DIALECTS: dict[str, Dialect] = _by_format(vocabulary.FORMATS, _DIALECT_MODULES)
FORMATS: tuple[str, ...] = tuple(DIALECTS)


# format -> monitoring module (not in FORMATS: they keep nothing in BF16 themselves)
_MONITOR_MODULES: tuple[Monitor, ...] = (te_monitor,)
MONITORS: dict[str, Monitor] = _by_format(vocabulary.MONITORS, _MONITOR_MODULES)
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
