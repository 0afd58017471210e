"""Render a `PolicyDecision` in the dialects users paste into their training setup.

Belongs here: the public entry point `render(decision, fmt)` and the one table of formats (`RENDERERS`;
`FORMATS` is its keys). Each dialect lives in its own module (`te_yaml`, `megatron`, `hydra`, `torchao`)
with a `render(decision, options)` and an `applied(decision)` (what that dialect really keeps in BF16, see
`applied`); the records are in `options`, shared layer facts in `layout`, exact-name regexes in `regex`.
Must not be here: analysis or recommendation logic, I/O, web or database imports.
"""

from __future__ import annotations

from collections.abc import Callable

from fp8_policy.policy.records import PolicyDecision
from fp8_policy.policy.render import hydra, megatron, te_yaml, torchao
from fp8_policy.policy.render.options import RenderedPolicy, RenderOptions

RENDERERS: dict[str, Callable[[PolicyDecision, RenderOptions], RenderedPolicy]] = {
    "te-yaml": te_yaml.render,
    "megatron": megatron.render,
    "hydra": hydra.render,
    "torchao": torchao.render,
}
FORMATS: tuple[str, ...] = tuple(RENDERERS)


def render(decision: PolicyDecision, fmt: str, options: RenderOptions | None = None) -> RenderedPolicy:
    """Render `decision` as `fmt` (one of FORMATS)."""
    renderer = RENDERERS.get(fmt)
    if renderer is None:
        raise ValueError(f"unknown policy format {fmt!r}; expected one of {', '.join(FORMATS)}")
    return renderer(decision, options or RenderOptions())


__all__ = ["FORMATS", "RENDERERS", "RenderOptions", "RenderedPolicy", "render"]
