"""The precision ladder on the TE backend: which modules run under their own `te.autocast(recipe=...)` or in BF16.

Belongs here: resolving the policy's `precision_ladder` names to modules, choosing one rung per module, the
nesting rules, the per-rung TE recipe objects and the debug-session check before anything changes. Must not be
here: the wrapping itself (`te.wrap_forward`), name resolution (`names`).

Rules:
* A rung equal to the outer recipe changes nothing. `bf16` runs the module under `autocast(enabled=False)`, like a
  skip. `delayed` under another outer recipe is kept in BF16 too (the safe side: delayed scaling's amax history
  cannot be one layer's recipe; Megatron's TEQuantizationRecipe rejects it,
  megatron/core/extensions/transformer_engine.py). Any other rung runs the module's forward under a fresh
  `te.autocast(enabled=True, recipe=<rung recipe>)` nested in the outer one, as Megatron does for its
  `--te-precision-config-file` (`_get_fp8_autocast_for_quant_recipe`).
* A module inside a module kept in BF16 keeps BF16 (its rung is dropped, with a warning): the skip list wins.
* A fused module named by several rungs (LayerNormMLP's fc1 / fc2) takes the safest of them (the one nearest BF16).
* Rung recipes are TE's class defaults, with the policy recipe's `fp8_format` for FP8 rungs when the policy recipe
  is FP8 (NVFP4BlockScaling takes only its defaults); `layer_recipes={"mxfp8": MXFP8BlockScaling(...)}` overrides.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fp8_policy.client.apply.debug_session import DebugConfigConflict, debug_names, find_conflicts, session_lookup
from fp8_policy.client.apply.names import NameIndex, UnmatchedLayers, resolve_names
from fp8_policy.client.apply.plan import PRECISIONS, RECIPE_CLASSES, Plan
from fp8_policy.client.apply.report import AlreadyBF16, MatchedLayer
from fp8_policy.client.apply.te_import import import_te

if TYPE_CHECKING:
    from torch import nn

ContextFactory = Callable[[], Any]
FP8_RUNGS = ("mxfp8", "block", "current", "delayed")


@dataclass(slots=True)
class LadderTargets:
    """Modules the ladder changes: `bf16` (fqn -> module) beside the plan's targets, `recipes` (fqn -> rung)."""

    bf16: dict[str, nn.Module] = field(default_factory=dict)
    recipes: dict[str, tuple[nn.Module, str]] = field(default_factory=dict)


def outer_recipe_name(recipe: Any, policy_recipe: str | None) -> str | None:
    """Our name of the outer autocast's recipe: from the recipe object's class when given, else the policy's."""
    if recipe is not None:
        by_class = {cls: name for name, cls in RECIPE_CLASSES.items()}
        for cls in type(recipe).__mro__:
            if cls.__name__ in by_class:
                return by_class[cls.__name__]
    return policy_recipe


def _under(fqn: str, prefixes: Mapping[str, Any]) -> str | None:
    """The prefix `fqn` lies at or under (the root "" covers everything), or None."""
    for prefix in prefixes:
        if prefix == "" or fqn == prefix or fqn.startswith(prefix + "."):
            return prefix
    return None


def plan_ladder(
    model: nn.Module | Sequence[nn.Module],
    plan: Plan,
    outer: str | None,
    *,
    allow_unmatched: bool,
    quantizable: Callable[[nn.Module], bool],
) -> LadderTargets:
    """Resolve the ladder against `model` (unmatched names raise like skips), filling the plan's report."""
    rungs = {name: rung for name, rung in plan.view.layer_precisions.items() if rung != outer}
    out = LadderTargets()
    if not rungs:
        return out
    resolved, unmatched = resolve_names(NameIndex(model), rungs)
    if unmatched and not allow_unmatched:
        raise UnmatchedLayers(unmatched)
    plan.report.unmatched += unmatched
    kept = {t.fqn: t.module for t in plan.targets}
    chosen: dict[str, tuple[nn.Module, str, list[str]]] = {}
    for name, (found, how) in resolved.items():
        rung = "bf16" if rungs[name] == "delayed" and outer != "delayed" else rungs[name]
        for entry in found:
            module, previous = entry.module, chosen.get(entry.fqn)
            if previous is not None and PRECISIONS.index(previous[1]) >= PRECISIONS.index(rung):
                previous[2].append(name)
                continue
            chosen[entry.fqn] = (module, rung, [*(previous[2] if previous else []), name])
            reason = f"ladder {rungs[name]}" + (" (kept BF16)" if rung != rungs[name] else "")
            plan.report.matched.append(MatchedLayer(name, entry.fqn, type(module).__name__, how, reason))
    for fqn, (module, rung, names) in chosen.items():
        if not any(quantizable(m) for m in module.modules()):
            if rung == "bf16":
                plan.report.already_bf16 += [AlreadyBF16(n, "no TE module: already high precision") for n in names]
            continue
        if rung == "bf16":
            out.bf16[fqn] = module
        elif (owner := _under(fqn, kept)) is not None:
            plan.report.warnings.append(
                f"`{', '.join(names)}` ({rung} in the precision ladder) lies in `{owner or '<root>'}`, which the "
                "policy keeps in BF16: it stays in BF16"
            )
        else:
            out.recipes[fqn] = (module, rung)
    return out


def rung_recipe(rung: str, policy: Mapping[str, Any], outer: str | None, layer_recipes: Mapping[str, Any]) -> Any:
    """The TE recipe object a rung's modules run under (see the module rules)."""
    if rung in layer_recipes:
        return layer_recipes[rung]
    from fp8_policy.client.apply.recipe import recipe_from_policy

    kwargs: dict[str, Any] = {}
    policy_recipe = policy.get("recipe")
    fmt = (policy_recipe.get("kwargs") or {}).get("fp8_format") if isinstance(policy_recipe, Mapping) else None
    if (
        rung in FP8_RUNGS
        and outer in FP8_RUNGS
        and isinstance(fmt, str)
        and fmt.rsplit(".", 1)[-1].upper()
        in (
            "E4M3",
            "HYBRID",
        )
    ):
        kwargs["fp8_format"] = fmt
    return recipe_from_policy({"recipe": {"name": rung, "kwargs": kwargs}})


def recipe_context(rung_recipe_object: Any) -> ContextFactory:
    """Fresh `te.autocast(enabled=True, recipe=...)` contexts (`te.fp8_autocast` before TE 2.9)."""
    te = import_te("transformer_engine.pytorch")
    if hasattr(te, "autocast"):
        return functools.partial(te.autocast, enabled=True, recipe=rung_recipe_object)
    return functools.partial(te.fp8_autocast, enabled=True, fp8_recipe=rung_recipe_object)


def check_session(
    model: nn.Module | Sequence[nn.Module],
    kept: list[tuple[str, nn.Module]],
    nvfp4: list[tuple[str, nn.Module]],
    quantizable: Callable[[nn.Module], bool],
) -> None:
    """Raise DebugConfigConflict when the active debug session would stop TE on these modules."""
    lookup = session_lookup()
    if lookup is None or not (kept or nvfp4):
        return
    logged: dict[int, list[str]] = {}
    for entry in NameIndex(model).entries:
        logged.setdefault(id(entry.module), []).append(entry.name)
    conflicts = find_conflicts(
        lookup,
        [(fqn, debug_names(m, logged, quantizable)) for fqn, m in kept],
        [(fqn, debug_names(m, logged, quantizable)) for fqn, m in nvfp4],
    )
    if conflicts:
        raise DebugConfigConflict(conflicts)
