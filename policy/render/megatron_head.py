"""What Megatron-LM runs a logged head at (BF16, whatever the decision asks for it), and the words that say so.

Belongs here: the note line (the script and the JSON `megatron.notes`) and the clause of Megatron's `applied()`.
Must not be here: which layers are heads and the precision the decision runs them at (policy/render/heads.py,
shared with bionemo's Hydra recipe; `heads` and `low_precision_heads` are re-exported here for Megatron's callers), matchers, flags and the script (policy/render/megatron.py), the JSON section
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

from fp8_policy.policy.render import heads as shared
from fp8_policy.policy.render import precision
from fp8_policy.policy.render.heads import heads as heads
from fp8_policy.policy.render.heads import low_precision_heads as low_precision_heads

WHY = "output_layer is a plain ColumnParallelLinear (gpt_model.py), not a TE module"


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
    return shared.approximation(low, WHY)
