"""bionemo-recipes Hydra overrides for a `PolicyDecision`.

Belongs here: `fp8_config.*` overrides, the `fp8_layers` list, Hydra value syntax and shell quoting, and what
that list really keeps in BF16 (`applied`). Must not be here: other dialects.

Conventions (bionemo-recipes `fp8_layers` / `fp8_config`, https://github.com/NVIDIA/bionemo-framework/tree/main/bionemo-recipes):
* `fp8_layers` lists the body blocks that STAY in FP8, 1-indexed; unlisted blocks run in BF16. bionemo's
  granularity is the block, so the safe-side approximation is: a block with ANY skipped layer or GEMM
  override leaves the list (its healthy layers go to BF16 with it; stated in the file's first lines).
  Logged indices are already 1-based when they come from TE's `layer_number`; 0-based logs get +1.
* The precision ladder (`decision.layer_precisions`): `fp8_layers` holds one recipe for every listed block, so a
  body layer whose rung needs more precision than the outer recipe (e.g. a layer failing NVFP4 lifted to MXFP8)
  takes its block out of the list (BF16, the safe side), and a cheaper rung (e.g. nvfp4 under MXFP8) runs at the
  outer recipe; both are stated in the first lines, and the per-block granularity is always said.
* bionemo builds and runs the LM head in BF16 by default (`te.autocast(enabled=False)`), so heads need
  no override; a comment says so. A head the decision runs in low precision (its ladder rung, e.g. nvfp4, or the
  outer recipe) therefore runs in BF16: the safe side, an approximation naming the head in the first line and in
  `applied()` (rules shared with Megatron in policy/render/heads.py); a head the decision keeps in BF16 is exact. Embedding/other layers cannot be expressed: they are listed as not applied.
* `fp8_format` is its own key, so it is removed from `fp8_recipe_kwargs`.
"""

from __future__ import annotations

import math
import re
import shlex

from fp8_policy.policy.records import PRECISIONS, PolicyDecision, Precision
from fp8_policy.policy.render import heads as head_rules
from fp8_policy.policy.render import pipeline, precision
from fp8_policy.policy.render.applied import AppliedPolicy, names
from fp8_policy.policy.render.layout import body_blocks, fp8_format, is_one_based, merged_overrides, module_index
from fp8_policy.policy.render.options import RenderedPolicy, RenderOptions
from fp8_policy.policy.render.te_yaml import unapplied_note
from fp8_policy.policy.vocabulary import MEDIA_TYPES

MEDIA_TYPE = MEDIA_TYPES["hydra"]
FILENAME = "bionemo_fp8_overrides.txt"
_BARE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/]*$")
_RESERVED = {"true", "false", "null", "nan", "inf"}
HEAD_WHY = "bionemo runs its LM head under te.autocast(enabled=False)"


def hydra_value(value: object) -> str:
    """A Python value in Hydra override grammar (strings quoted when they would parse as something else)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(hydra_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {hydra_value(item)}" for key, item in value.items()) + "}"
    text = str(value)
    if _BARE.match(text) and text.lower() not in _RESERVED:
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _requested(decision: PolicyDecision) -> set[str]:
    """Layers the recommendation keeps (wholly or partly) in BF16, those that ran in BF16 included."""
    return set(precision.whole_bf16_layers(decision)) | set(merged_overrides(decision))


def ladder_rungs(decision: PolicyDecision) -> tuple[dict[str, str], dict[str, str]]:
    """(finer, cheaper): body layers whose ladder rung needs more precision than the outer recipe (their block
    leaves `fp8_layers`) and those at a cheaper rung (they run at the outer recipe); layer -> rung."""
    body = {name for members in body_blocks(decision).values() for name in members}
    outer = PRECISIONS.index(decision.recipe.name)
    rungs = {name: rung for name, rung in precision.layer_recipes(decision).items() if name in body}
    finer = {name: rung for name, rung in rungs.items() if PRECISIONS.index(rung) > outer}
    return finer, {name: rung for name, rung in rungs.items() if name not in finer}


def bf16_blocks(decision: PolicyDecision) -> list[int]:
    """Logged indices of the body blocks that leave `fp8_layers`: any skipped or overridden layer, or a layer whose
    ladder rung needs more precision than the outer recipe."""
    leave = _requested(decision) | set(ladder_rungs(decision)[0])
    return [i for i, members in body_blocks(decision).items() if leave & set(members)]


def fp8_layer_numbers(decision: PolicyDecision) -> list[int] | None:
    """1-indexed body blocks with no skipped or overridden layer; None when the run logged no body blocks."""
    blocks = body_blocks(decision)
    if not blocks:
        return None
    one_based = is_one_based(decision)
    leave = set(bf16_blocks(decision))
    return [module_index(i, one_based) + 1 for i in blocks if i not in leave]


def applied(decision: PolicyDecision) -> AppliedPolicy:
    """Whole BF16 blocks, heads (bionemo's default) and the requested layers it cannot express."""
    blocks = body_blocks(decision)
    requested = _requested(decision)
    leave = bf16_blocks(decision)
    in_blocks = {name for i in leave for name in blocks[i]}
    heads = head_rules.heads(decision)
    bf16 = tuple(layer.name for layer in decision.layers if layer.name in in_blocks or layer.name in heads)
    body = {name for members in blocks.values() for name in members}
    not_applied = tuple(
        n
        for n in dict.fromkeys((*precision.whole_bf16_layers(decision), *merged_overrides(decision)))
        if n not in body and n not in heads
    )
    parts = []
    finer, cheaper = ladder_rungs(decision)
    cheaper = {n: rung for n, rung in cheaper.items() if n not in in_blocks}  # those in a BF16 block run BF16
    runs_at = precision.precision_of(decision)
    # every layer the decision runs in low precision that a BF16 block takes along (finer rungs are named apart)
    widened = [n for n in bf16 if n in in_blocks and runs_at.get(n) != precision.BF16 and n not in finer]
    if widened or finer:
        lifted = f"{len(finer)} layer(s) whose ladder rung needs more than {decision.recipe.name} ({_rungs(finer)})"
        ran = set(precision.ran_in_bf16(decision)) & in_blocks  # kept where they ran, not moved by the advice
        moved = (requested & in_blocks) - ran
        reasons = [f"{len(moved)} skipped/overridden layer(s)"] if moved else []
        reasons += [f"{len(ran)} layer(s) that ran in BF16"] if ran else []
        parts.append(
            f"fp8_layers works per block, so block(s) {_numbers(decision, leave)} run wholly in BF16 "
            f"for {' and '.join(reasons + ([lifted] if finer else []))}, taking {len(widened)} "
            "healthy layer(s) with them"
        )
    if cheaper:
        parts.append(
            f"{len(cheaper)} layer(s) at a cheaper ladder rung run at {decision.recipe.name} (fp8_layers holds one "
            f"recipe per block): {_rungs(cheaper)}"
        )
    promoted = [n for n in merged_overrides(decision) if n in in_blocks]
    if promoted:
        parts.append(
            f"{len(promoted)} GEMM override(s) run as whole layers (the te-yaml policy keeps only those GEMMs in BF16)"
        )
    if not_applied:
        parts.append(f"cannot keep {names(list(not_applied))} (outside the transformer blocks) in BF16")
    low_heads = head_rules.approximation(head_rules.low_precision_heads(decision), HEAD_WHY)
    if low_heads:
        parts.append(low_heads)
    result = AppliedPolicy("hydra", bf16, {}, not_applied, "; ".join(parts) + "." if parts else None)
    return pipeline.qualify(result, decision, pipeline.by_position(decision, "hydra"))


def _rungs(rungs: dict[str, str]) -> str:
    return names([f"{name} ({rung})" for name, rung in rungs.items()])


def _precision(decision: PolicyDecision, name: str) -> Precision | None:
    return next((layer.precision for layer in decision.layers if layer.name == name), None)


def _numbers(decision: PolicyDecision, indices: list[int]) -> str:
    one_based = is_one_based(decision)
    return ", ".join(str(module_index(i, one_based) + 1) for i in indices)


def overrides(decision: PolicyDecision) -> list[str]:
    """The Hydra overrides, one per entry, unquoted."""
    recipe = decision.recipe
    kwargs = {key: value for key, value in recipe.kwargs.items() if key != "fp8_format"}
    lines = [
        "fp8_config.enabled=True",
        f"fp8_config.fp8_recipe={recipe.class_path}",
        f"fp8_config.fp8_format={fp8_format(recipe)}",
        f"fp8_config.fp8_recipe_kwargs={hydra_value(kwargs)}",
    ]
    numbers = fp8_layer_numbers(decision)
    if numbers is not None:
        lines.append("fp8_layers=[" + ",".join(str(n) for n in numbers) + "]")
    return lines


def _head_note(decision: PolicyDecision) -> str:
    heads = head_rules.heads(decision)
    if not heads:
        return "no head layer was logged."
    asked = set(decision.skip_layers) | set(merged_overrides(decision))
    if set(heads) & asked:
        return "the recommended head BF16 (skip or GEMM override) needs no override."
    if all(_precision(decision, h) is Precision.HIGH for h in heads):
        return "it ran in BF16 in the analysed run too (no FP8 evidence for it)."
    low = head_rules.low_precision_heads(decision)
    allowed = "/".join(dict.fromkeys("FP4" if rung == precision.NVFP4 else "FP8" for rung in low.values()))
    return (
        f"it stays BF16 even though the analysis would allow {allowed or 'FP8'} there "
        f"({_rungs(low)}; the safe side, stated as an approximation)."
    )


def _comments(decision: PolicyDecision) -> list[str]:
    one_based = is_one_based(decision)
    blocks = body_blocks(decision)
    leave = bf16_blocks(decision)
    lines = [
        "# bionemo-recipes Hydra overrides generated by fp8-policy: append them to the train command.",
        f"# {applied(decision).statement()}",
        f"# FP8 recipe: {decision.recipe.name} ({decision.recipe.class_path})",
        "# fp8_layers = transformer blocks that STAY in FP8, 1-indexed (logged numbering"
        f"{'' if one_based else ' + 1'}); blocks not listed run in BF16.",
        f"# Blocks kept in BF16: {_numbers(decision, leave) if leave else 'none'}",
        "# bionemo's fp8_layers works per transformer block: a per-layer decision (skip, GEMM override, precision"
        " ladder rung) is applied to its whole block on the safe side (BF16), or not at all when cheaper.",
        *unapplied_note(decision),
    ]
    if not blocks:
        lines.append("# fp8_layers not set: the analysed run logged no transformer blocks.")
    lines.append(
        "# LM head: bionemo keeps lm_head in BF16 by default (te.autocast(enabled=False)); " + _head_note(decision)
    )
    rest = list(applied(decision).not_applied)
    if rest:
        lines.append("# Not expressible with fp8_layers (outside the transformer blocks): " + ", ".join(rest))
    gemm_overrides = merged_overrides(decision)
    if gemm_overrides:
        listed = ", ".join(f"{name} [{'/'.join(g)}]" for name, g in gemm_overrides.items())
        lines.append(f"# Per-GEMM overrides run here as whole BF16 blocks (safe side): {listed}.")
        lines.append(
            "# To keep only those GEMMs in BF16, use the te-yaml policy as the TE debug-API config "
            "(debug_api.initialize(config_file=...)) and keep their blocks in fp8_layers."
        )
    return lines


def render(decision: PolicyDecision, options: RenderOptions) -> RenderedPolicy:
    """Comment lines, then one shell-quoted override per line."""
    lines = _comments(decision) + [shlex.quote(item) for item in overrides(decision)]
    return RenderedPolicy(content="\n".join(lines) + "\n", media_type=MEDIA_TYPE, filename=FILENAME)
