"""Grouped expert modules: a TE `GroupedLinear` logs one layer per expert GEMM, but frameworks address the module.

Belongs here: recognising `<module>.gemm_<i>` layers, grouping them by module, the one precision a whole grouped
module must run at so that no expert runs below what the decision asks for it (the safe side), and the sentence
naming the experts taken along. Must not be here: a dialect's paths or emission.

Facts (read from the sources):
* TE `GroupedLinear` (transformer_engine/pytorch/module/grouped_linear.py) holds `weight0..weightN-1` in one module;
  under the debug API each expert's GEMM is logged as `<name>.gemm_<i>`, and a debug section on that name acts on
  that GEMM alone (the TE YAML stays per expert). Its `get_quantizer_roles` gives every GEMM the same
  `QuantizerRole(module_type="grouped_linear", name=<module name>)`: a `CustomRecipe` factory cannot tell experts
  apart either.
* Megatron-LM's `TEGroupedLinear` (megatron/core/extensions/transformer_engine.py) takes its precision config by
  its own `named_modules()` path (`...mlp.experts.linear_fc1`; gpt_model.py calls `finish_init` per module), so a
  matcher on `...linear_fc1.gemm_5` selects nothing. torchao and torchtitan convert whole modules as well.
* Megatron's `SequentialMLP` experts (`...mlp.experts.local_experts.<i>.linear_fc1`) are modules of their own: no
  grouping is needed for them.
"""

from __future__ import annotations

import re
from collections import defaultdict

from fp8_policy.policy.records import PRECISIONS, PolicyDecision
from fp8_policy.policy.render import precision
from fp8_policy.policy.render.applied import names

_GEMM = re.compile(r"^(?P<module>.+)\.gemm_(?P<expert>\d+)$")


def split(name: str) -> tuple[str, int] | None:
    """`...linear_fc2.gemm_5` -> (`...linear_fc2`, 5); None for a layer that is no grouped GEMM."""
    match = _GEMM.match(name)
    return (match["module"], int(match["expert"])) if match else None


def module_of(name: str) -> str:
    """The module a layer belongs to: itself, or its grouped module for a `.gemm_<i>` layer."""
    found = split(name)
    return found[0] if found else name


def groups(decision: PolicyDecision) -> dict[str, list[str]]:
    """Grouped module (logged name without `.gemm_<i>`) -> its logged expert layers, in decision order."""
    out: dict[str, list[str]] = defaultdict(list)
    seen = [layer.name for layer in decision.layers] + [lp.layer for lp in decision.layer_precisions]
    for name in dict.fromkeys(seen + list(decision.skip_layers)):
        found = split(name)
        if found is not None:
            out[found[0]].append(name)
    return dict(out)


def group_precisions(decision: PolicyDecision) -> dict[str, str]:
    """Grouped module -> the precision the whole module must run at: the most precise its experts run at once
    the decision is applied (`precision.precision_of`; BF16 when any expert is kept)."""
    applied = precision.precision_of(decision)
    order = {p: i for i, p in enumerate(PRECISIONS)}
    out = {}
    for module, members in groups(decision).items():
        rungs = [applied.get(name, decision.recipe.name) for name in members]
        out[module] = max(rungs, key=lambda p: order.get(p, len(order)))
    return out


def taken_along(decision: PolicyDecision) -> dict[str, tuple[str, list[str], list[str]]]:
    """Grouped modules some of whose experts the decision runs at another precision than the module must:
    module -> (module precision, experts that asked for it, experts taken along)."""
    applied = precision.precision_of(decision)
    out = {}
    for module, target in group_precisions(decision).items():
        members = groups(decision)[module]
        asked = [n for n in members if applied.get(n, decision.recipe.name) == target]
        along = [n for n in members if n not in asked]
        if along:
            out[module] = (target, asked, along)
    return out


def approximation(decision: PolicyDecision, why: str) -> str | None:
    """One clause naming the grouped modules a framework must run whole, and the experts each takes along."""
    moved = taken_along(decision)
    if not moved:
        return None
    parts = []
    for module, (target, asked, along) in moved.items():
        experts = ", ".join(str(split(n)[1]) for n in asked if split(n) is not None)  # type: ignore[index]
        parts.append(
            f"{module} runs wholly at {target} for expert(s) {experts}, taking {len(along)} expert(s) along "
            f"({names([n.rsplit('.', 1)[-1] for n in along])})"
        )
    return f"{why}: " + "; ".join(parts)


def whole_module_bf16(decision: PolicyDecision, bf16: tuple[str, ...]) -> tuple[str, ...]:
    """`bf16` with every expert of a grouped module one of whose experts is in it (the module goes whole)."""
    members = groups(decision)
    modules = {module_of(name) for name in bf16}
    extra = [n for module in modules for n in members.get(module, ())]
    return tuple(dict.fromkeys((*bf16, *extra)))
