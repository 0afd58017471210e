"""A test-side stand-in for Transformer Engine's CustomRecipe machinery (TE cannot run here: it needs CUDA), to load
a rendered `te-recipe` module and read back what TE would run each (module, GEMM) at.

Re-implemented from TE 2.20 (transformer_engine/pytorch/quantization.py `QuantizerRole`; pytorch/module/linear.py
and grouped_linear.py `get_quantizer_roles`: forward slots [input, weight, output], backward [grad_output,
grad_input], boundary slots None; pytorch/tensor/hybrid_tensor.py `HybridQuantizer`: two distinct sub-quantizers,
`columnwise_source` in ("original", "rowwise_dequantized"); pytorch/tensor/identity_tensor.py `IdentityQuantizer`;
pytorch/custom_recipes/quantizer_factories.py; common/recipe/__init__.py `CustomRecipe(qfactory)`), and Megatron-LM's
`_resolve_callable_from_python_import_path` (megatron/core/fp8_utils.py: `module.attr`, imported with importlib).
Which GEMM consumes which direction (fprop = weight.row x input.row, dgrad = weight.col x grad_output.row, wgrad =
input.col x grad_output.col) follows TE's custom_recipes/quantizer_factory_zoo.py docstrings.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class QuantizerRole:
    module_type: str = ""
    tensor_type: str = ""
    name: str = ""


class FakeQuantizer:
    def __init__(self, fmt: str) -> None:
        self.fmt = fmt


class IdentityQuantizer(FakeQuantizer):
    def __init__(self) -> None:
        super().__init__("bf16")


class HybridQuantizer:
    def __init__(self, rowwise_quantizer, columnwise_quantizer, columnwise_source: str = "original") -> None:
        if rowwise_quantizer is columnwise_quantizer:
            raise ValueError("The rowwise and columnwise quantizers must be distinct objects.")
        if columnwise_source not in ("original", "rowwise_dequantized"):
            raise ValueError(f"columnwise_source {columnwise_source!r}")
        self.rowwise_quantizer = rowwise_quantizer
        self.columnwise_quantizer = columnwise_quantizer


class CustomRecipe:
    def __init__(self, qfactory, **kwargs) -> None:
        if not callable(qfactory):
            raise TypeError("qfactory must be callable")
        self.qfactory = qfactory
        self.kwargs = kwargs


class TransformerEngineBaseModule:
    name: str | None = None


def _factory(fmt: str):
    def factory(role):
        return FakeQuantizer(fmt)

    return factory


def _modules() -> dict[str, types.ModuleType]:
    te = types.ModuleType("transformer_engine")
    pt = types.ModuleType("transformer_engine.pytorch")
    pt.IdentityQuantizer = IdentityQuantizer  # type: ignore[attr-defined]
    pt.HybridQuantizer = HybridQuantizer  # type: ignore[attr-defined]
    pt.QuantizerRole = QuantizerRole  # type: ignore[attr-defined]
    recipes = types.ModuleType("transformer_engine.pytorch.custom_recipes")
    factories = types.ModuleType("transformer_engine.pytorch.custom_recipes.quantizer_factories")
    for name, fmt in (
        ("nvfp4_factory", "nvfp4"),
        ("mxfp8_factory", "mxfp8"),
        ("float8_block_scaling_factory", "block"),
        ("current_scaling_factory", "current"),
        ("delayed_scaling_factory", "delayed"),
    ):
        setattr(factories, name, _factory(fmt))
    recipes.quantizer_factories = factories  # type: ignore[attr-defined]
    common = types.ModuleType("transformer_engine.common")
    recipe = types.ModuleType("transformer_engine.common.recipe")
    recipe.CustomRecipe = CustomRecipe  # type: ignore[attr-defined]
    module = types.ModuleType("transformer_engine.pytorch.module")
    base = types.ModuleType("transformer_engine.pytorch.module.base")
    base.TransformerEngineBaseModule = TransformerEngineBaseModule  # type: ignore[attr-defined]
    return {
        "transformer_engine": te,
        "transformer_engine.pytorch": pt,
        "transformer_engine.pytorch.custom_recipes": recipes,
        "transformer_engine.pytorch.custom_recipes.quantizer_factories": factories,
        "transformer_engine.common": common,
        "transformer_engine.common.recipe": recipe,
        "transformer_engine.pytorch.module": module,
        "transformer_engine.pytorch.module.base": base,
    }


@contextmanager
def loaded(text: str, folder: Path, module_name: str = "fp8_policy_recipe") -> Iterator[types.ModuleType]:
    """The rendered module imported from `folder` with the fake TE in sys.modules (both removed afterwards)."""
    (folder / f"{module_name}.py").write_text(text)
    fakes = _modules()
    saved = {name: sys.modules.get(name) for name in (*fakes, module_name)}
    sys.modules.update(fakes)
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(module_name)
    finally:
        sys.path.remove(str(folder))
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old


def megatron_factory(dotted: str):
    """megatron/core/fp8_utils.py `_resolve_callable_from_python_import_path`."""
    parts = dotted.rsplit(".", 1)
    if len(parts) == 1:
        raise ValueError(f"Invalid fp8_quantizer_factory '{dotted}'. Expected 'pkg.mod.func'.")
    fn = getattr(importlib.import_module(parts[0]), parts[1], None)
    if fn is None or not callable(fn):
        raise ValueError(f"{dotted} is not a callable")
    return fn


def _directions(quantizer) -> tuple[str, str]:
    if isinstance(quantizer, HybridQuantizer):
        return quantizer.rowwise_quantizer.fmt, quantizer.columnwise_quantizer.fmt
    return quantizer.fmt, quantizer.fmt


def gemm_formats(qfactory, name: str, module_type: str = "linear") -> tuple[str, str, str]:
    """(fprop, dgrad, wgrad) as TE would run them for a module called `name` (both operands must agree)."""
    slots = {t: _directions(qfactory(QuantizerRole(module_type, t, name))) for t in ("input", "weight", "grad_output")}
    qfactory(None)  # the boundary slots: must not raise
    fprop = {slots["input"][0], slots["weight"][0]}
    dgrad = {slots["weight"][1], slots["grad_output"][0]}
    wgrad = {slots["input"][1], slots["grad_output"][1]}
    for gemm, formats in (("fprop", fprop), ("dgrad", dgrad), ("wgrad", wgrad)):
        assert len(formats) == 1, f"{name}: the two operands of {gemm} differ: {formats}"
    return fprop.pop(), dgrad.pop(), wgrad.pop()
