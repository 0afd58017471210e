"""What Megatron-LM runs a logged head at (BF16, whatever the decision asks for it), and the words that say so.

Belongs here: which layers of a decision are heads, the precision the decision asks for those it does not keep in
BF16, the note line (the script and the JSON `megatron.notes`) and the clause of Megatron's `applied()`.
Must not be here: matchers, flags and the script (policy/render/megatron.py), the JSON section
(policy/recommend/megatron.py).

Rule (Megatron-LM, https://github.com/NVIDIA/Megatron-LM): GPTModel's `output_layer` is a plain
`tensor_parallel.ColumnParallelLinear` (megatron/core/models/gpt/gpt_model.py), not a TE module, so no
`--te-precision-config-file` matcher reaches it and no FP8/FP4 recipe quantizes it: it runs in BF16. Only
`fp8_output_proj` swaps in `TELMHeadColumnParallelLinear`, under `--fp8-recipe mxfp8` only (transformer_config.py),
refusing tied embeddings and deferred embedding wgrad; fp8-policy does not emit it. A head the decision runs in low
precision (its ladder rung, or the outer recipe) therefore runs in BF16 under Megatron: the safe side, stated as an
approximation, never as "exactly". A head the decision keeps in BF16 (skipped, overridden, or already BF16 in the
run) runs as asked.
"""

from __future__ import annotations

from fp8_policy.policy.records import LayerGroup, PolicyDecision
from fp8_policy.policy.render import precision
from fp8_policy.policy.render.applied import names

WHY = "output_layer is a plain ColumnParallelLinear (gpt_model.py), not a TE module"


def heads(decision: PolicyDecision) -> list[str]:
    """Every logged head of the decision (Megatron runs each in BF16), in decision order."""
    return [layer.name for layer in decision.layers if layer.structure.group is LayerGroup.HEAD]


def low_precision_heads(decision: PolicyDecision) -> dict[str, str]:
    """Heads the decision runs in low precision -> that precision (their ladder rung, else the outer recipe)."""
    kept = set(precision.kept_layers(decision))
    applied = precision.precision_of(decision)
    return {name: applied[name] for name in heads(decision) if name not in kept}


def note(low: dict[str, str], outer: str) -> list[str]:
    """At most one line: the heads Megatron runs in BF16 instead of the precision asked, and why."""
    if not low:
        return []
    listed = ", ".join(f"{name} ({rung})" for name, rung in low.items())
    text = (
        f"Head layer(s) {listed} run in BF16 under Megatron, not at that precision: {WHY}, so no "
        "--te-precision-config-file matcher or FP8/FP4 recipe reaches it"
    )
    if set(low.values()) == {"mxfp8"} and outer == "mxfp8":
        return [
            text + "; --fp8-output-proj would run it in MXFP8 under --fp8-recipe mxfp8 (not emitted: "
            "TELMHeadColumnParallelLinear refuses tied embeddings and deferred embedding wgrad)."
        ]
    fp4 = "; Megatron has no FP4 (nvfp4) setting for it at all" if precision.NVFP4 in low.values() else ""
    return [text + fp4 + "."]


def approximation(low: dict[str, str]) -> str | None:
    """The clause Megatron's `applied()` adds for those heads (None when there are none)."""
    if not low:
        return None
    listed = names([f"{name} ({rung})" for name, rung in low.items()])
    return f"{len(low)} head layer(s) run in BF16 instead of the precision asked ({WHY}): {listed}"
