"""STAND-IN for the absent transformer_engine package (TE needs CUDA and cannot be installed here).

Installed into `sys.modules` by the `fake_te` fixture only. It mirrors the real signatures read from
NVIDIA/TransformerEngine @ d0067d0 (2.20.0.dev0) and tag v2.8:
* `transformer_engine/common/recipe/__init__.py`: `Format` (E2M1/E4M3/E5M2/HYBRID as `_FormatHelper`
  NamedTuples), `MMParams(use_split_accumulator=True)`, and the pydantic dataclasses `DelayedScaling`,
  `Float8CurrentScaling`, `MXFP8BlockScaling`, `Float8BlockScaling`, `NVFP4BlockScaling` (2.20) with their fields and defaults
  (env-var defaults replaced by their unset values); `fp8_quant_*` stay unannotated class attributes, and
  pydantic dataclasses ignore unknown kwargs exactly as TE's do.
* `transformer_engine/pytorch/quantization.py`: `autocast(enabled, calibrating, recipe, amax_reduction_group,
  _graph)` (TE >= 2.9), refusing concurrent re-entry of one instance like the real `__enter__`;
  `fp8_autocast(enabled, calibrating, fp8_recipe, fp8_group, _graph)` (a @contextmanager on TE 2.8).
The FP8 on/off state is a plain stack here; `Linear` records whether FP8 was on when it ran.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from contextlib import contextmanager
from enum import Enum
from typing import Any, NamedTuple

from pydantic.dataclasses import dataclass
from torch import nn


class _FormatHelper(NamedTuple):
    max_fwd: float
    max_bwd: float


class Format(Enum):
    E2M1 = _FormatHelper(max_fwd=6, max_bwd=6)
    E4M3 = _FormatHelper(max_fwd=448, max_bwd=448)
    E5M2 = _FormatHelper(max_fwd=57344, max_bwd=57344)
    HYBRID = _FormatHelper(max_fwd=E4M3.max_fwd, max_bwd=E5M2.max_bwd)


@dataclass(frozen=True)
class MMParams:
    use_split_accumulator: bool = True


class Recipe:
    """Base recipe class (not a dataclass, as in TE)."""


@dataclass(repr=False)
class DelayedScaling(Recipe):
    margin: int = 0
    fp8_format: Format = Format.HYBRID
    amax_history_len: int = 1024
    amax_compute_algo: Any = "max"
    scaling_factor_compute_algo: Callable | None = None
    reduce_amax: bool = True
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: str | None = None

    def __post_init__(self) -> None:
        assert self.fp8_format != Format.E5M2, "Pure E5M2 training is not supported."


@dataclass(repr=False)
class Float8CurrentScaling(Recipe):
    use_power_2_scales: bool = False
    fp8_format: Format = Format.HYBRID
    fp8_quant_fwd_inp = None  # unannotated in TE: a class attribute, not a constructor field
    fp8_gemm_fprop: MMParams = MMParams(use_split_accumulator=False)
    fp8_gemm_dgrad: MMParams = MMParams(use_split_accumulator=True)
    fp8_gemm_wgrad: MMParams = MMParams(use_split_accumulator=True)
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: str | None = None


@dataclass(repr=False)
class MXFP8BlockScaling(Recipe):
    margin: int = 0
    fp8_format: Format = Format.E4M3
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: str | None = None
    enable_2d_quantization: bool = False


@dataclass(repr=False)
class Float8BlockScaling(Recipe):
    use_f32_scales: bool = False
    fp8_format: Format = Format.E4M3
    fp8_quant_fwd_inp = None
    x_block_scaling_dim: int = 1
    w_block_scaling_dim: int = 2
    grad_block_scaling_dim: int = 1
    fp8_gemm_fprop: MMParams = MMParams(use_split_accumulator=True)
    fp8_gemm_dgrad: MMParams = MMParams(use_split_accumulator=True)
    fp8_gemm_wgrad: MMParams = MMParams(use_split_accumulator=True)
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: str | None = None

    def __post_init__(self) -> None:
        assert self.fp8_gemm_fprop.use_split_accumulator, "Split accumulator required for fprop."


@dataclass(repr=False)
class NVFP4BlockScaling(Recipe):
    """TE 2.20's NVFP4BlockScaling fields (env-var defaults replaced by their unset values)."""

    disable_rht: bool = False
    disable_stochastic_rounding: bool = False
    disable_2d_quantization: bool = False
    row_scaled_activation: bool = False
    fp4_format: Format = Format.E2M1
    fp8_format: Format = Format.E4M3
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: str | None = None

    def __post_init__(self) -> None:
        assert self.fp4_format == Format.E2M1, "Only E2M1 is supported for NVFP4 scaling"
        assert self.fp8_format == Format.E4M3, "Only E4M3 is supported for NVFP4 scaling"


class State:
    """Fake FP8GlobalStateManager: a stack of `enabled` flags (and of the recipe in effect) and an event log."""

    stack: list[bool] = []
    recipe_stack: list[Any] = []
    events: list[tuple[str, bool]] = []
    recipes: list[Any] = []  # the recipe each autocast was given

    @classmethod
    def fp8_enabled(cls) -> bool:
        return bool(cls.stack) and cls.stack[-1]

    @classmethod
    def recipe(cls) -> Any:
        """The recipe in effect (a disabled context keeps the outer one, as TE's autocast_enter does)."""
        return cls.recipe_stack[-1] if cls.recipe_stack else None


class autocast:  # noqa: N801 - TE's name
    def __init__(
        self,
        enabled: bool = True,
        calibrating: bool = False,
        recipe: Recipe | None = None,
        amax_reduction_group: Any = None,
        _graph: bool = False,
    ) -> None:
        self._enabled, self._entered, self.recipe = enabled, False, recipe
        State.recipes.append(recipe)

    def __enter__(self) -> autocast:
        if self._entered:
            raise RuntimeError("autocast context manager cannot be entered more than once concurrently")
        self._entered = True
        State.stack.append(self._enabled)
        State.recipe_stack.append(self.recipe if self.recipe is not None else State.recipe())
        State.events.append(("enter", self._enabled))
        return self

    def __exit__(self, *exc: object) -> None:
        State.stack.pop()
        State.recipe_stack.pop()
        State.events.append(("exit", self._enabled))
        self._entered = False


@contextmanager
def fp8_autocast(
    enabled: bool = True,
    calibrating: bool = False,
    fp8_recipe: Recipe | None = None,
    fp8_group: Any = None,
    _graph: bool = False,
):
    State.stack.append(enabled)
    State.recipe_stack.append(fp8_recipe if fp8_recipe is not None else State.recipe())
    State.recipes.append(fp8_recipe)
    State.events.append(("fp8_autocast enter", enabled))
    try:
        yield
    finally:
        State.stack.pop()
        State.recipe_stack.pop()
        State.events.append(("fp8_autocast exit", enabled))


class Linear(nn.Linear):
    """A 'TE module': defined under transformer_engine.*, records whether FP8 was on (and its recipe) in forward."""

    def forward(self, x):
        self.fp8_seen = State.fp8_enabled()
        self.recipe_seen = State.recipe() if self.fp8_seen else None
        return super().forward(x)


Linear.__module__ = "transformer_engine.pytorch.module.linear"


def install(monkeypatch: Any, version: str = "2.9") -> types.ModuleType:
    """Put the fake package into sys.modules; version < 2.9 has only `fp8_autocast` (as TE 2.8)."""
    State.stack, State.events, State.recipes, State.recipe_stack = [], [], [], []
    root, common = types.ModuleType("transformer_engine"), types.ModuleType("transformer_engine.common")
    recipe, pytorch = (
        types.ModuleType("transformer_engine.common.recipe"),
        types.ModuleType("transformer_engine.pytorch"),
    )
    recipe_classes = (DelayedScaling, Float8CurrentScaling, MXFP8BlockScaling, Float8BlockScaling, NVFP4BlockScaling)
    for cls in (Format, MMParams, Recipe, *recipe_classes):
        setattr(recipe, cls.__name__, cls)
    pytorch.fp8_autocast, pytorch.Linear = fp8_autocast, Linear
    if tuple(int(p) for p in version.split(".")[:2]) >= (2, 9):
        pytorch.autocast = autocast
    root.common, root.pytorch, common.recipe = common, pytorch, recipe
    modules = {
        "transformer_engine": root,
        "transformer_engine.common": common,
        "transformer_engine.common.recipe": recipe,
        "transformer_engine.pytorch": pytorch,
    }
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return pytorch


__all__ = ["State", "install", "Linear"]
