"""The facets of a run's metadata the runs list filters and groups by: GPU, recipe, TE version, git commit.

Belongs here: which metadata keys name each facet (the first one present wins, as the dashboard's columns read
them) and the one spelling two values are compared in (`facet_key`), used both for what a run stores at upload
(db/runs.py) and for a filter's value (service/runs/actions.py), so `?gpu=H100` finds a run whose metadata
says "NVIDIA H100 80GB HBM3" and `?recipe=mxfp8` one that says "MXFP8BlockScaling". Must not be here: SQL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fp8_policy._lazy import lazy_module

if TYPE_CHECKING:
    from fp8_policy.policy.analysis import recipes
    from fp8_policy.policy.recommend import gpu
else:  # imported on first use: their packages (numpy with them) are not on the service's start-up path, which
    # imports this module with db/runs.py (tests/service/app/test_start_up_imports.py)
    recipes = lazy_module("fp8_policy.policy.analysis.recipes")
    gpu = lazy_module("fp8_policy.policy.recommend.gpu")

# facet -> metadata keys naming it, in priority order (service/web/static/runs.js META_KEYS reads the same)
FACET_KEYS: dict[str, tuple[str, ...]] = {
    "gpu": ("gpu", "gpu_name", "gpu_model", "gpu_arch", "compute_capability"),
    "recipe": ("recipe", "fp8_recipe"),
    "te_version": ("te_version",),
    "git_commit": ("git_commit", "commit", "git_sha"),
}
FACETS: tuple[str, ...] = tuple(FACET_KEYS)
MAX_FACET_CHARS = 100  # runs.meta_* columns: String(100)


def facet_text(metadata: Mapping[str, Any] | None, facet: str) -> str | None:
    """The metadata's value of `facet` as text: the first key of FACET_KEYS[facet] holding a non-blank string or
    number (a nested object or a boolean names nothing)."""
    for key in FACET_KEYS[facet]:
        value = (metadata or {}).get(key)
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            continue
        text = str(value).strip()
        if text:
            return text
    return None


def facet_key(facet: str, text: str | None) -> str | None:
    """`text` in the spelling runs are compared in: the GPU's product or architecture (policy/recommend/gpu.py
    `gpu_key`), the recipe's name (`normalize_recipe`, else the text lowercased), a TE version or commit lowercased
    (a leading "v" of a version dropped). At most MAX_FACET_CHARS characters; None when blank."""
    if text is None or not text.strip():
        return None
    text = " ".join(text.split())
    if facet == "gpu":
        key = gpu.gpu_key(text)
    elif facet == "recipe":
        key = recipes.normalize_recipe(text) or text.lower()
    elif facet == "te_version":
        key = text.lower().removeprefix("v")
    elif facet == "git_commit":
        key = text.lower()
    else:
        raise ValueError(f"unknown facet {facet!r}; expected one of {', '.join(FACETS)}")
    return key[:MAX_FACET_CHARS] if key else None


def run_facets(metadata: Mapping[str, Any] | None) -> dict[str, str | None]:
    """Each facet's key for a run with this metadata (None where the metadata does not say)."""
    return {facet: facet_key(facet, facet_text(metadata, facet)) for facet in FACETS}
