"""Facts about a decision's layers that several dialects need: blocks, numbering, paths, format.

Belongs here: body-block grouping, the 0-/1-based numbering rule, stripping the nvdlfw root and DDP
wrapper levels from logged names, merging GEMM overrides, the FP8 format and TE version parsing.
Must not be here: anything that emits a particular dialect.

Numbering rule: nvdlfw_inspect names ModuleList children by `child.layer_number` when it exists
(TE / Megatron TransformerLayer, 1-based) and by list index otherwise (0-based). A run whose smallest
body-block index is 0 is therefore 0-based; otherwise the names are taken to come from the 1-based
`layer_number`, and the torch/Megatron module index is `layer_number - 1` (`layer_number` is
`list index + 1` for TE TransformerLayer and for Megatron without pipeline parallelism).
"""

from __future__ import annotations

import re
from collections import defaultdict

from fp8_policy.policy.records import GEMMS, LayerGroup, PolicyDecision, RecipeChoice

ROOT = "model"
WRAPPER_LEVELS = ("module",)  # DDP / Megatron Float16Module wrappers add `.module`

# TE recipe classes' fp8_format defaults (transformer_engine/common/recipe/__init__.py); NVFP4BlockScaling accepts
# only E4M3 for its FP8 block scales.
_DEFAULT_FORMAT = {"delayed": "HYBRID", "current": "HYBRID", "block": "E4M3", "mxfp8": "E4M3", "nvfp4": "E4M3"}


def body_blocks(decision: PolicyDecision) -> dict[int, tuple[str, ...]]:
    """Body-block index as logged -> names of its logged layers, ordered by index."""
    blocks: dict[int, list[str]] = defaultdict(list)
    for layer in decision.layers:
        if layer.structure.group is LayerGroup.BODY and layer.structure.index is not None:
            blocks[layer.structure.index].append(layer.name)
    return {index: tuple(blocks[index]) for index in sorted(blocks)}


def is_one_based(decision: PolicyDecision) -> bool:
    """True when body indices come from TE's 1-based `layer_number` (smallest body index is not 0)."""
    blocks = body_blocks(decision)
    return bool(blocks) and min(blocks) != 0


def module_index(logged_index: int, one_based: bool) -> int:
    """The 0-based ModuleList index of a logged block index."""
    return logged_index - 1 if one_based else logged_index


def strip_root(name: str) -> str:
    """Drop nvdlfw's `model.` root and the DDP `module.` levels: the FQN in the unwrapped model."""
    parts = name.split(".")
    if parts and parts[0] == ROOT and len(parts) > 1:
        parts = parts[1:]
    while len(parts) > 1 and parts[0] in WRAPPER_LEVELS:
        parts = parts[1:]
    return ".".join(parts)


def split_at_index(path: str, index: int) -> tuple[str, str] | None:
    """Split `a.b.<index>.c.d` into (`a.b`, `c.d`) at the first path segment equal to `index`."""
    parts = path.split(".")
    for position, part in enumerate(parts):
        if part.isascii() and part.isdigit() and int(part) == index:
            return ".".join(parts[:position]), ".".join(parts[position + 1 :])
    return None


def renumber(path: str, index: int, new_index: int) -> str:
    """Replace the block-index segment of `path` by `new_index` (unchanged when not found)."""
    split = split_at_index(path, index)
    if split is None:
        return path
    prefix, rest = split
    return ".".join(part for part in (prefix, str(new_index), rest) if part)


def torch_fqn(name: str, index: int | None, one_based: bool) -> str:
    """The `named_modules()` FQN of a logged layer: root/wrappers stripped, block index made 0-based."""
    path = strip_root(name)
    if index is None:
        return path
    return renumber(path, index, module_index(index, one_based))


def layer_index(decision: PolicyDecision) -> dict[str, int | None]:
    """Layer name -> logged block index (None outside the body)."""
    return {
        layer.name: layer.structure.index if layer.structure.group is LayerGroup.BODY else None
        for layer in decision.layers
    }


def merged_overrides(decision: PolicyDecision) -> dict[str, tuple[str, ...]]:
    """Layer -> GEMMs to keep in high precision, merged per layer, in GEMMS order; skipped layers excluded."""
    skipped = set(decision.skip_layers)
    gemms: dict[str, set[str]] = defaultdict(set)
    for override in decision.gemm_overrides:
        if override.layer not in skipped:
            gemms[override.layer].update(override.gemms)
    return {layer: tuple(g for g in GEMMS if g in chosen) for layer, chosen in gemms.items() if chosen}


def fp8_format(recipe: RecipeChoice) -> str:
    """`HYBRID` or `E4M3`: an explicit `fp8_format` kwarg wins, else the recipe class default."""
    explicit = recipe.kwargs.get("fp8_format")
    if explicit is not None:
        return str(explicit).split(".")[-1].upper()
    return _DEFAULT_FORMAT.get(recipe.name, "HYBRID")


def te_version_tuple(version: str | None) -> tuple[int, int] | None:
    """`"2.13.0.dev0+abc"` -> (2, 13); None when unknown or unparsable."""
    if not version:
        return None
    match = re.match(r"\s*v?(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2])) if match else None
