"""Logged heads a format runs in BF16 whatever the decision asks, and the clause that says so.

Belongs here: which layers of a decision are heads (`heads`, also for the formats that name them in their header:
te_recipe.py, torchtitan.py), the precision the decision runs those it does not keep in BF16 at, and the
`applied()` clause naming them, shared by the formats that run every head in BF16 (Megatron-LM:
policy/render/megatron_head.py; bionemo's Hydra recipe: policy/render/hydra.py). Must not be here: why a given
format runs its head in BF16 (each caller passes its reason) or any format's syntax.

Rule: a head the decision runs in low precision (its ladder rung, or the outer recipe; `precision.precision_of`)
but the format runs in BF16 is an approximation on the safe side, named with that precision, never "exactly". A
head the decision keeps in BF16 (skipped, overridden, or already BF16 in the run: `precision.kept_layers`) runs as
asked.
"""

from __future__ import annotations

from fp8_policy.policy.records import LayerGroup, PolicyDecision
from fp8_policy.policy.render import precision
from fp8_policy.policy.render.applied import names


def heads(decision: PolicyDecision) -> list[str]:
    """Every logged head of the decision, in decision order."""
    return [layer.name for layer in decision.layers if layer.structure.group is LayerGroup.HEAD]


def low_precision_heads(decision: PolicyDecision) -> dict[str, str]:
    """Heads the decision runs in low precision -> that precision (their ladder rung, else the outer recipe)."""
    kept = set(precision.kept_layers(decision))
    applied = precision.precision_of(decision)
    return {name: applied[name] for name in heads(decision) if name not in kept}


def approximation(low: dict[str, str], why: str) -> str | None:
    """The `applied()` clause for those heads run in BF16 because `why` (None when there are none)."""
    if not low:
        return None
    listed = names([f"{name} ({rung})" for name, rung in low.items()])
    return f"{len(low)} head layer(s) run in BF16 instead of the precision asked ({why}): {listed}"
