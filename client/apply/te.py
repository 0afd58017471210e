"""Transformer Engine backend: run the skipped modules' forward under `autocast(enabled=False)`, and the precision
ladder's other rungs under their own `autocast(recipe=...)` (`te_ladder`), after checking the active debug session.

Belongs here: the lazy TE import and its error, choosing `te.autocast` / `te.fp8_autocast`, wrapping and
unwrapping a module's forward, and `apply_te`. Name matching lives in `plan`/`names` (tested on CPU
through the torchao backend and with fake contexts); this module stays a thin layer over it because TE
cannot run without CUDA.

Checked against TE's source (NVIDIA/TransformerEngine @ d0067d0, 2.20.0.dev0; tags v2.8, v2.9):
* `transformer_engine/pytorch/quantization.py`: `class autocast` (l. 972) takes `enabled`, `calibrating`,
  `recipe`, `amax_reduction_group`, `_graph`; `__enter__` (l. 1037-1042) raises "autocast context manager
  cannot be entered more than once concurrently", so a fresh instance is made per forward call.
  `fp8_autocast` (l. 941) is a deprecated wrapper around it (DeprecationWarning).
* `transformer_engine/pytorch/__init__.py` exports `autocast` from v2.9 on (first tag containing commit
  85a9199 "Generalize quantization APIs"); v2.8 exports only `fp8_autocast` (`pytorch/fp8.py` l. 645-652, a
  @contextmanager with the same `enabled` keyword). Hence `hasattr(te, "autocast")`.
* `FP8GlobalStateManager.autocast_enter` / `autocast_exit` (l. 729-783): a disabled context sets
  `fp8_enabled=False`, nests by `autocast_depth` and never reduces amaxes; `autocast.__exit__` (l. 1056-1060)
  restores the outer state. With `recipe=None`, `autocast_enter` calls `get_default_fp8_recipe()` (l. 242-254),
  which asserts `not torch.compiler.is_compiling()`: pass the outer recipe (`recipe=`) when compiling.
* `pytorch/module/base.py` `init_fp8_metadata` (l. 1528-1536, called from `prepare_forward`) reads
  `FP8GlobalStateManager.is_fp8_enabled()` at forward time, so a context around the module's forward is
  what decides FP8 for its fprop and, through the autograd context, its dgrad/wgrad.
* Weights created under `quantized_model_init(enabled=True)` (`fp8_model_init` before 2.9) stay FP8: build
  skipped modules under `quantized_model_init(enabled=False)`, as bionemo does for its LM head.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from fp8_policy.client.apply.plan import make_plan
from fp8_policy.client.apply.report import ApplyReport
from fp8_policy.client.apply.te_import import TE_MISSING, import_te

__all__ = ["TE_MISSING", "apply_te", "import_te", "restore_forwards", "wrap_forward"]

if TYPE_CHECKING:
    from torch import nn

ContextFactory = Callable[[], AbstractContextManager[Any]]
_ORIGINAL = "_fp8_policy_original_forward"
_CONTEXT = "_fp8_policy_context"
_PRIOR = "_fp8_policy_prior_forward"  # an instance-level forward set by someone else, restored on unwrap
DELAYED_WARNING = (
    "the policy recipe is DelayedScaling: per-layer autocast(enabled=False) conflicts with its amax reduction "
    "(Megatron refuses BF16 first/last layers with delayed scaling); switch to Float8CurrentScaling or "
    "Float8BlockScaling, or apply the skips through the TE debug API (write_te_debug_config)"
)


def autocast_disabled_factory(recipe: Any = None) -> ContextFactory:
    """A factory of fresh BF16 contexts: `te.autocast(enabled=False)` (TE >= 2.9), else `te.fp8_autocast`.

    `recipe` is handed to the disabled context; without one TE builds its default recipe on every entry,
    which it refuses inside torch.compile'd regions (`get_default_fp8_recipe`).
    """
    te = import_te("transformer_engine.pytorch")
    if hasattr(te, "autocast"):
        return functools.partial(te.autocast, enabled=False, recipe=recipe)
    return functools.partial(te.fp8_autocast, enabled=False, fp8_recipe=recipe)


def is_te_module(module: nn.Module) -> bool:
    """True for modules defined by transformer_engine (only those quantize under TE autocast)."""
    return any(cls.__module__.startswith("transformer_engine.") for cls in type(module).__mro__)


def _forward_in_context(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    # A method bound to the module (not a closure), so copy.deepcopy rebinds it to the copy.
    with getattr(self, _CONTEXT)():
        return getattr(self, _ORIGINAL)(*args, **kwargs)


def wrap_forward(module: nn.Module, context_factory: ContextFactory) -> bool:
    """Make `module.forward` run inside `context_factory()`; False (no change) when already wrapped."""
    if _ORIGINAL in module.__dict__:
        return False
    module.__dict__[_PRIOR] = module.__dict__.get("forward")
    module.__dict__[_ORIGINAL] = module.forward
    module.__dict__[_CONTEXT] = context_factory
    module.__dict__["forward"] = types.MethodType(_forward_in_context, module)
    return True


def is_wrapped(module: nn.Module) -> bool:
    """Whether `wrap_forward` was applied to this module."""
    return _ORIGINAL in module.__dict__


def unwrap_forward(module: nn.Module) -> bool:
    """Undo `wrap_forward`; False when the module was not wrapped."""
    if _ORIGINAL not in module.__dict__:
        return False
    for key in (_ORIGINAL, _CONTEXT, "forward"):
        module.__dict__.pop(key, None)
    prior = module.__dict__.pop(_PRIOR, None)
    if prior is not None:
        module.__dict__["forward"] = prior
    return True


def restore_forwards(model: nn.Module) -> list[str]:
    """Undo every wrap under `model`; the FQNs restored."""
    return [fqn for fqn, module in model.named_modules() if unwrap_forward(module)]


def apply_te(
    model: nn.Module | Sequence[nn.Module],
    policy: Mapping[str, Any],
    *,
    allow_unmatched: bool = False,
    gemm_overrides: str = "whole_module",
    recipe: Any = None,
    context_factory: ContextFactory | None = None,
    quantizable: Callable[[nn.Module], bool] | None = None,
    layer_recipes: Mapping[str, Any] | None = None,
    check_debug_session: bool = True,
) -> ApplyReport:
    """Wrap each skipped module's forward in a BF16 context and each ladder rung's in its own recipe's autocast
    (see `client.apply.apply_policy` and `te_ladder`).

    recipe: the recipe of the outer FP8 autocast (e.g. `recipe_from_policy(policy)`), passed to the disabled
    contexts; needed under torch.compile; its class also tells which ladder rungs differ from the outer recipe
    (default: the policy's recipe). context_factory: returns a fresh BF16 context per call (default: TE's
    autocast(enabled=False)); tests and custom setups inject their own. quantizable: which modules TE would
    quantize (default: TE modules); a skipped module with none in its subtree is reported as already BF16.
    layer_recipes: rung -> TE recipe object for the ladder's per-layer autocasts (default: built from the rung).
    check_debug_session: raise `DebugConfigConflict` (before any change) when an active nvdlfw_inspect session
    watches a kept layer with LogFp8TensorStats, or an NVFP4 layer with bare LogFp8TensorStats stats.
    """
    from fp8_policy.client.apply import te_ladder

    is_quantized = quantizable or is_te_module
    factory = context_factory or autocast_disabled_factory(recipe)
    plan = make_plan(
        model,
        policy,
        backend="te",
        allow_unmatched=allow_unmatched,
        gemm_overrides=gemm_overrides,
        quantizable=is_quantized,
    )
    outer = te_ladder.outer_recipe_name(recipe, plan.view.recipe_name)
    ladder = te_ladder.plan_ladder(model, plan, outer, allow_unmatched=allow_unmatched, quantizable=is_quantized)
    bf16 = {id(t.module): (t.fqn, t.module) for t in plan.targets}
    contexts = {
        rung: te_ladder.recipe_context(te_ladder.rung_recipe(rung, policy, outer, layer_recipes or {}))
        for rung in dict.fromkeys(r for _, r in ladder.recipes.values())
    }
    if check_debug_session:
        nvfp4 = [(fqn, m) for fqn, (m, rung) in ladder.recipes.items() if rung == "nvfp4"]
        te_ladder.check_session(model, list(bf16.values()), nvfp4, is_quantized)
    for fqn, module in bf16.values():
        wrap_forward(module, factory)  # idempotent: a second apply leaves one wrap
        plan.report.wrapped.append(fqn)
    for fqn, (module, rung) in ladder.recipes.items():
        wrap_forward(module, contexts[rung])
        plan.report.precision_wrapped[fqn] = rung
    if ladder.recipes:
        plan.report.warnings.append(
            f"{len(ladder.recipes)} module(s) run under their own recipe (precision ladder; outer recipe "
            f"{outer or 'unknown'}): watch them with the te-monitor config, not with stats of the outer recipe"
        )
    if plan.view.recipe_name == "delayed" and bf16:
        plan.report.warnings.append(DELAYED_WARNING)
    return plan.report
