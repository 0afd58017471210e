"""Layer names as nvdlfw_inspect assigns them, without setting `.name` on the user's modules.

Belongs here: the naming walk and which modules are GEMM layers. Must not be here: hooks or logging.

Source: nvdlfw_inspect 0.2.2 `nvdlfw_inspect/api.py` `infer_and_assign_layer_names`: the root is "model",
children follow attribute names, a ModuleList is not named itself and its children are named by their
`layer_number` attribute when they have one (Megatron/TE blocks, 1-based) or by their index. The walk is
reproduced rather than called because nvdlfw's version writes `module.name` on every module.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from torch import nn


def assigned_names(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(name, module) in nvdlfw_inspect's order; a module reached twice keeps its last name, as in nvdlfw."""
    out: list[tuple[str, nn.Module]] = []

    def visit(module: nn.Module, prefix: str) -> None:
        if isinstance(module, nn.ModuleList):
            for name, child in module.named_children():
                visit(child, f"{prefix}.{getattr(child, 'layer_number', name)}")
            return
        out.append((prefix, module))
        for name, child in module.named_children():
            visit(child, f"{prefix}.{name}")

    visit(model, "model")
    return out


def gemm_layers(named: list[tuple[str, nn.Module]]) -> dict[str, nn.Module]:
    """The nn.Linear modules (torchao's Float8Linear is one) by their last assigned name, in model order."""
    last = {id(module): name for name, module in named}
    return {name: module for name, module in named if isinstance(module, nn.Linear) and last[id(module)] == name}


def name_matcher(layers: str | Iterable[str] | None) -> Callable[[str], bool]:
    """A predicate on layer names: a regex (`re.search`), a collection of exact names, or None (matches nothing)."""
    if layers is None:
        return lambda name: False
    if isinstance(layers, str):
        pattern = re.compile(layers)
        return lambda name: pattern.search(name) is not None
    names = frozenset(layers)
    return lambda name: name in names
