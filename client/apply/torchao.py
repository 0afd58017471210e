"""torchao backend: `convert_to_float8_training` with a filter that keeps the policy's layers in high precision.

Belongs here: the torchao import, the module filter (policy skips, torchao's multiple-of-16 rule, an
optional user filter), the default config for the policy's recipe, and the per-FQN report.
Must not be here: name resolution (see `names` / `plan`).

torchao filters on `named_modules()` FQNs of the model it converts (`swap_linear_layers` in
`torchao/float8/float8_linear_utils.py`); the plan gives each matched module's FQN directly, so the
`layer_number` (1-based) -> ModuleList index (0-based) step is undone by construction. A skipped container
(a whole block) keeps every nn.Linear under it. Dims that are not multiples of 16 are left alone, as
torchao's own `_auto_filter_for_*` do ("hardware requirement for float8").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from fp8_policy.client.apply.plan import make_plan
from fp8_policy.client.apply.report import ApplyReport

if TYPE_CHECKING:
    import torch
    from torch import nn

TORCHAO_MISSING = "torchao is not installed: pip install 'fp8-policy[torch]'"
# Closest torchao float8 training recipe for each policy recipe (torchao has no delayed or 128-block scaling).
TORCHAO_RECIPES = {"current": "tensorwise", "delayed": "tensorwise", "block": "rowwise", "mxfp8": "rowwise"}
ModuleFilter = Callable[["nn.Module", str], bool]


def dims_multiple_of_16(module: nn.Module) -> bool:
    """torchao's float8 requirement: both weight dims divisible by 16."""
    weight = cast("torch.Tensor", module.weight)  # nn.Module.__getattr__ is typed `Tensor | Module`
    out_features, in_features = weight.shape
    return out_features % 16 == 0 and in_features % 16 == 0


def _under(fqn: str, prefixes: list[str]) -> bool:
    return any(p == "" or fqn == p or fqn.startswith(p + ".") for p in prefixes)


def _import_torchao() -> tuple[Any, Any, type]:
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        from torchao.float8.float8_linear import Float8Linear
    except ImportError as exc:
        raise ImportError(TORCHAO_MISSING) from exc
    return convert_to_float8_training, Float8LinearConfig, Float8Linear


def default_config(config_cls: Any, recipe_name: str | None, report: ApplyReport) -> Any:
    """`Float8LinearConfig.from_recipe_name(...)` for the policy's recipe (tensorwise when unknown)."""
    torchao_recipe = TORCHAO_RECIPES.get(recipe_name or "", "tensorwise")
    if recipe_name and recipe_name != "current":
        report.warnings.append(f"torchao has no '{recipe_name}' recipe: using its '{torchao_recipe}' recipe")
    return config_cls.from_recipe_name(torchao_recipe)


def apply_torchao(
    model: nn.Module | Sequence[nn.Module],
    policy: Mapping[str, Any],
    *,
    config: Any = None,
    module_filter_fn: ModuleFilter | None = None,
    allow_unmatched: bool = False,
    gemm_overrides: str = "whole_module",
) -> ApplyReport:
    """Convert `model` in place with torchao float8 training, keeping the policy's layers in high precision.

    config: a `Float8LinearConfig` (default: from the policy recipe; pass `Float8LinearConfig(emulate=True)`
    on CPU). module_filter_fn: extra filter ANDed with the policy's (True = convert).
    """
    from torch import nn

    if not isinstance(model, nn.Module):
        raise TypeError("the torchao backend converts one nn.Module; convert each model chunk separately")
    convert, config_cls, float8_linear = _import_torchao()
    plan = make_plan(
        model,
        policy,
        backend="torchao",
        allow_unmatched=allow_unmatched,
        gemm_overrides=gemm_overrides,
        quantizable=lambda m: isinstance(m, nn.Linear),
    )
    report, skip = plan.report, [t.fqn for t in plan.targets]

    def keep_fp8_filter(module: nn.Module, fqn: str) -> bool:
        return (
            not _under(fqn, skip)
            and not isinstance(module, float8_linear)
            and dims_multiple_of_16(module)
            and (module_filter_fn is None or module_filter_fn(module, fqn))
        )

    before = {fqn: m for fqn, m in model.named_modules() if isinstance(m, nn.Linear)}
    convert(
        model,
        config=config or default_config(config_cls, plan.view.recipe_name, report),
        module_filter_fn=keep_fp8_filter,
    )
    report.kept = [fqn for fqn in before if _under(fqn, skip)]
    report.not_convertible = [fqn for fqn, m in before.items() if not _under(fqn, skip) and not dims_multiple_of_16(m)]
    report.converted = [fqn for fqn, m in model.named_modules() if isinstance(m, float8_linear)]
    return report
