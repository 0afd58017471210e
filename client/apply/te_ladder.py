"""The precision ladder on the TE backend: which modules run under their own `te.autocast(recipe=...)` or in BF16.

Belongs here: resolving the policy's `precision_ladder` names to modules, choosing one rung per module, the
nesting rules, the per-rung TE recipe objects and the debug-session check before anything changes. Must not be
here: the wrapping itself (`te.wrap_forward`), name resolution (`names`).

Rules:
* The policy's BF16 set (`fp8_skip_layers`, GEMM overrides) decides what runs in BF16 and wins over a rung for the
  same module. A `bf16` rung outside it is not applied (a warning names it): the plan decided otherwise, e.g. it
  switches the recipe and asks for a re-run before skipping (the service's renderers do the same).
* A rung equal to the outer recipe changes nothing. `delayed` under another outer recipe runs at an FP8 outer
  recipe (per-tensor current scaling and block scales are at least as fine) or at `current` under NVFP4:
  delayed scaling's amax history cannot be one layer's recipe (Megatron's TEQuantizationRecipe rejects it,
  megatron/core/extensions/transformer_engine.py). Any other rung runs the module's forward under a fresh
  `te.autocast(enabled=True, recipe=<rung recipe>)` nested in the outer one, as Megatron does for its
  `--te-precision-config-file` (`_get_fp8_autocast_for_quant_recipe`).
* A module inside a module kept in BF16 keeps BF16 (its rung is dropped, with a warning): the skip list wins.
* A fused module named by several rungs (LayerNormMLP's fc1 / fc2) takes the safest of them (the one nearest BF16,
  a rung equal to the outer recipe included).
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
from fp8_policy.client.apply.report import MatchedLayer
from fp8_policy.client.apply.te_import import import_te

if TYPE_CHECKING:
    from torch import nn

ContextFactory = Callable[[], Any]
FP8_RUNGS = ("mxfp8", "block", "current", "delayed")


@dataclass(slots=True)
class LadderTargets:
    """Modules the ladder runs under their own recipe: `recipes` (fqn -> (module, rung))."""

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


def effective_rung(rung: str, outer: str) -> str:
    """The rung a layer runs at under `outer`: a BF16 rung adds nothing to the policy's BF16 set (it runs at
    `outer`), `delayed` under another recipe runs at an FP8 `outer` or at `current` under NVFP4 (module rules)."""
    if rung == "bf16":
        return outer
    if rung == "delayed" and outer != "delayed":
        return "current" if outer == "nvfp4" else outer
    return rung


def plan_ladder(
    model: nn.Module | Sequence[nn.Module],
    plan: Plan,
    outer: str | None,
    *,
    allow_unmatched: bool,
    quantizable: Callable[[nn.Module], bool],
) -> LadderTargets:
    """Resolve the ladder against `model` (unmatched names raise like skips), filling the plan's report."""
    out = LadderTargets()
    rungs = plan.view.layer_precisions
    if not rungs or all(rung == outer for rung in rungs.values()):
        return out
    if outer not in PRECISIONS:
        plan.report.warnings.append("the outer recipe is unknown (pass recipe=): the precision ladder is not applied")
        return out
    resolved, unmatched = resolve_names(NameIndex(model), rungs)
    if unmatched and not allow_unmatched:
        raise UnmatchedLayers(unmatched)
    plan.report.unmatched += unmatched
    kept = {t.fqn: t.module for t in plan.targets}
    chosen: dict[str, tuple[nn.Module, str, list[str]]] = {}
    unapplied: list[str] = []
    for name, (found, how) in resolved.items():
        rung = effective_rung(rungs[name], outer)
        for entry in found:
            under = _under(entry.fqn, kept)
            if rungs[name] == "bf16" and under is None and any(quantizable(m) for m in entry.module.modules()):
                unapplied.append(name)
            previous = chosen.get(entry.fqn)
            names = [*(previous[2] if previous else []), name]
            if previous is None or PRECISIONS.index(rung) > PRECISIONS.index(previous[1]):  # fused: the safest
                chosen[entry.fqn] = (entry.module, rung, names)
            else:
                chosen[entry.fqn] = (previous[0], previous[1], names)
            if rung != outer:
                reason = f"ladder {rungs[name]}" + (f" (runs {rung})" if rung != rungs[name] else "")
                plan.report.matched.append(MatchedLayer(name, entry.fqn, type(entry.module).__name__, how, reason))
    if unapplied:
        plan.report.warnings.append(
            f"the precision ladder finds no low-precision rung for {len(unapplied)} layer(s) the policy keeps in "
            f"{outer} ({', '.join(dict.fromkeys(unapplied))}): not applied, the policy's BF16 set decides (follow its "
            "rationale, e.g. re-run with the new recipe first)"
        )
    for fqn, (module, rung, names) in chosen.items():
        if rung == outer or not any(quantizable(m) for m in module.modules()):
            continue
        if (owner := _under(fqn, kept)) is not None:
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
