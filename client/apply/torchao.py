"""torchao backend: `convert_to_float8_training` with a filter that keeps the policy's layers in high precision.

Belongs here: the torchao import, the module filter (policy skips, torchao's multiple-of-16 rule, an
optional user filter), the default config for the policy's recipe, and the per-FQN report.
Must not be here: name resolution (see `names` / `plan`).

torchao filters on `named_modules()` FQNs of the model it converts (`swap_linear_layers` in
`torchao/float8/float8_linear_utils.py`); the plan gives each matched module's FQN directly, so the
`layer_number` (1-based) -> ModuleList index (0-based) step is undone by construction. A skipped container
(a whole block) keeps every nn.Linear under it. Dims that are not multiples of 16 are left alone, as
torchao's own `_auto_filter_for_*` do ("hardware requirement for float8").

The precision ladder (`precision_ladder`, torchao 0.18 read), with the TE backend's rules (`te_ladder`: the policy's
BF16 set wins, `bf16` rungs outside it are named and not applied, `delayed` runs at the outer recipe); `mxfp8` rungs use torchao's MXFP8 training (`torchao.prototype.moe_training.config.
MXFP8TrainingOpConfig` through `quantize_`, kernel preference EMULATED without CUDA) when that prototype exists,
else float8; `nvfp4` rungs become float8 (the safe side: torchao has no dense-Linear NVFP4 training, only NVFP4
inference configs and MoE kernels); `block` / `current` rungs use the float8 recipe of the model. The report's
`precision_wrapped` and warnings state each of these.
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


def _ladder(model: nn.Module, plan: Any, report: ApplyReport, allow_unmatched: bool) -> list[str]:
    """FQNs of the ladder's mxfp8 rungs; warnings for the rungs torchao cannot express and unapplied bf16 rungs."""
    from fp8_policy.client.apply.names import NameIndex, UnmatchedLayers, resolve_names
    from fp8_policy.client.apply.te_ladder import effective_rung

    outer = plan.view.recipe_name or "current"
    rungs = {name: rung for name, rung in plan.view.layer_precisions.items() if rung != outer}
    if not rungs:
        return []
    resolved, unmatched = resolve_names(NameIndex(model), rungs)
    if unmatched and not allow_unmatched:
        raise UnmatchedLayers(unmatched)
    report.unmatched += unmatched
    unapplied, mx, fp8 = [], [], []
    kept = [t.fqn for t in plan.targets]
    for name, (found, _how) in resolved.items():
        rung = effective_rung(rungs[name], outer)
        for entry in found:
            if _under(entry.fqn, kept):
                continue  # kept in high precision by the policy's BF16 set (skips, layers that ran in BF16)
            if rungs[name] == "bf16":
                unapplied.append(entry.fqn)
            elif rung == "mxfp8":
                mx.append(entry.fqn)
            elif rung != outer:
                fp8.append(f"{entry.fqn} ({rung})")
    if unapplied:
        report.warnings.append(
            "the precision ladder finds no low-precision rung for layer(s) the policy keeps in low precision (not "
            f"applied, the policy's BF16 set decides): {', '.join(unapplied)}"
        )
    if fp8:
        report.warnings.append(
            "precision ladder rungs torchao cannot express run as float8 with the model's recipe (NVFP4: the safe "
            "side, torchao has no dense-Linear NVFP4 training): " + ", ".join(fp8)
        )
    return mx


def _convert_mxfp8(model: nn.Module, fqns: list[str], report: ApplyReport) -> None:
    """MXFP8 training (torchao prototype) for exactly these nn.Linear FQNs; float8 when the prototype is missing."""
    try:
        import torch
        from torchao.prototype.moe_training.config import MXFP8TrainingOpConfig
        from torchao.quantization import quantize_
        from torchao.quantization.quantize_.common import KernelPreference
    except ImportError:
        report.warnings.append(f"this torchao has no MXFP8TrainingOpConfig: mxfp8 rungs run as float8: {fqns}")
        return
    from torch import nn

    targets = {fqn for fqn, m in model.named_modules() if fqn in fqns and isinstance(m, nn.Linear)}
    preference = KernelPreference.AUTO if torch.cuda.is_available() else KernelPreference.EMULATED
    quantize_(model, MXFP8TrainingOpConfig(kernel_preference=preference), filter_fn=lambda m, fqn: fqn in targets)
    report.precision_wrapped.update(dict.fromkeys(sorted(targets), "mxfp8"))
    report.warnings.append(
        f"{len(targets)} nn.Linear(s) of mxfp8 rungs use torchao's prototype MXFP8 training "
        f"(MXFP8TrainingOpConfig, kernel preference {preference.name})"
    )


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
    mx = _ladder(model, plan, report, allow_unmatched)
    mx = [fqn for fqn in mx if not _under(fqn, skip)]
    if mx:
        _convert_mxfp8(model, mx, report)

    def keep_fp8_filter(module: nn.Module, fqn: str) -> bool:
        return (
            not _under(fqn, skip)
            and fqn not in report.precision_wrapped
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
