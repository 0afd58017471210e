"""Which precision each layer of a decision runs at: the outer recipe, BF16, or its own rung of the precision ladder.

Belongs here: the one reading of `PolicyDecision.layer_precisions` / `skip_layers` / `gemm_overrides` that the
dialects share (who is kept in high precision, who runs under another recipe than the outer one), and the stat
names TE's debug features accept for a recipe. Must not be here: emission of any dialect.

Rules (the JSON's BF16 set is the contract: every format applies at least it, and the ladder never widens it):
* BF16 ("kept") layers: `skip_layers`, layers with GEMM overrides (the apply paths keep the whole module) and
  layers that already ran in high precision in the analysed run (`ran_in_bf16`: every format and both apply paths
  keep them in BF16, unless the ladder gives one a low-precision rung on evidence). The skip list wins over a ladder rung for the
  same layer; the recommender never emits such a pair (a layer failing NVFP4 that the ladder lifts to an FP8 rung
  leaves `fp8_skip_layers`: recommend/ladder.py, the lift rule), so `disagreements` is empty for its decisions
  and only a hand-edited decision meets this rule. A ladder `bf16` rung outside that set is not applied (`unapplied_bf16`): the plan decided otherwise
  (e.g. it changes the recipe first and asks for a re-run before skipping), and the outputs say so.
* A ladder rung equal to the outer recipe changes nothing; another FP8/FP4 rung is a per-layer recipe, except
  `delayed` under another outer recipe (delayed scaling's amax history cannot be one layer's recipe: Megatron's
  TEQuantizationRecipe rejects it, megatron/core/extensions/transformer_engine.py): under an FP8 outer recipe the
  layer keeps it (per-tensor current scaling and block scales are at least as fine), under NVFP4 it gets
  `current` (tensorwise), the nearest recipe a layer can run on its own. `apply_policy` applies the same rules.
* Stats TE accepts (transformer_engine/debug/features/log_fp8_tensor_stats.py `check_if_stat_is_supported`,
  log_nvfp4_tensor_stats.py): LogFp8TensorStats' bare stats use the layer's own recipe, so they are refused for
  an NVFP4 layer (use LogNvfp4TensorStats: `underflows%`, `mse`, logged as `nvfp4_underflows%` / `nvfp4_mse`);
  `overflows%` only under delayed scaling; `underflows%` / `overflows%` / `mse` need the high-precision tensor,
  which FP8/FP4 parameters (`fp8_param`) do not keep for the weight; a run that logged no weight series at all
  (FP8 primary weights without `fp8_param` in its metadata) is treated the same (`weights_without_stats`).
"""

from __future__ import annotations

from fp8_policy.policy.records import PRECISIONS, PolicyDecision, Precision
from fp8_policy.policy.render.layout import merged_overrides, te_version_tuple

PRECISION_ORDER: tuple[str, ...] = PRECISIONS  # cheapest first
BF16 = "bf16"
NVFP4 = "nvfp4"
NVFP4_STATS = ("underflows%", "mse")  # LogNvfp4TensorStats' config names (the log adds the nvfp4_ prefix)
_NEEDS_HIGH_PRECISION = ("underflows%", "overflows%", "mse")


def ran_in_bf16(decision: PolicyDecision) -> list[str]:
    """Layers that ran in high precision in the analysed run (plan lines) and stay there: all of them, except one
    the ladder gives a low-precision rung (evidence), in decision order; skipped ones included."""
    rungs = ladder(decision)
    return [
        layer.name
        for layer in decision.layers
        if layer.precision is Precision.HIGH and rungs.get(layer.name, BF16) == BF16
    ]


def kept_layers(decision: PolicyDecision) -> list[str]:
    """Layers that run wholly outside FP8/FP4 once the policy is applied, in decision order (see module rules)."""
    out: dict[str, None] = dict.fromkeys(decision.skip_layers)
    out.update(dict.fromkeys(merged_overrides(decision)))
    out.update(dict.fromkeys(ran_in_bf16(decision)))
    return list(out)


def kept_bf16(decision: PolicyDecision) -> list[str]:
    """Layers that ran in BF16 and stay there without being on the skip list (the JSON's `kept_bf16`)."""
    return [name for name in ran_in_bf16(decision) if name not in decision.skip_layers]


def skipped_layers(decision: PolicyDecision) -> list[str]:
    """Layers the recommendation skips: the skip list (layers that ran in high precision are `ran_in_bf16`,
    layers with GEMM overrides keep their exact GEMMs where a format can say so)."""
    return list(dict.fromkeys(decision.skip_layers))


def whole_bf16_layers(decision: PolicyDecision) -> list[str]:
    """Layers a format must keep wholly in BF16: the skip list, then the layers that ran in BF16 (`ran_in_bf16`)."""
    return list(dict.fromkeys((*decision.skip_layers, *ran_in_bf16(decision))))


def unapplied_bf16(decision: PolicyDecision) -> list[str]:
    """Ladder `bf16` rungs on layers the JSON's BF16 set leaves in low precision (not applied; see module rules)."""
    kept = set(kept_layers(decision))
    return [name for name, rung in ladder(decision).items() if rung == BF16 and name not in kept]


def ladder(decision: PolicyDecision) -> dict[str, str]:
    """Layer -> precision from the ladder (unknown rungs rejected, so a typo never reads as the outer recipe)."""
    out: dict[str, str] = {}
    for entry in decision.layer_precisions:
        if entry.precision not in PRECISIONS:
            raise ValueError(f"layer {entry.layer!r} has precision {entry.precision!r}; expected one of {PRECISIONS}")
        out[entry.layer] = entry.precision
    return out


def effective_rung(rung: str, outer: str) -> str:
    """The rung a layer runs at under `outer` (`delayed` under another recipe, see module rules)."""
    if rung == "delayed" and outer != "delayed":
        return "current" if outer == NVFP4 else outer
    return rung


def layer_recipes(decision: PolicyDecision) -> dict[str, str]:
    """Layer -> precision for the layers NOT kept that run under another recipe than the outer one."""
    kept = set(kept_layers(decision))
    outer = decision.recipe.name
    rungs = {name: effective_rung(p, outer) for name, p in ladder(decision).items() if name not in kept}
    return {name: p for name, p in rungs.items() if p not in (outer, BF16)}


def precision_of(decision: PolicyDecision) -> dict[str, str]:
    """Every layer of the decision (and every ladder layer) -> the precision it runs at once applied."""
    kept = set(kept_layers(decision))
    recipes = layer_recipes(decision)
    names = [layer.name for layer in decision.layers] + [lp.layer for lp in decision.layer_precisions]
    names += list(kept)
    return {name: BF16 if name in kept else recipes.get(name, decision.recipe.name) for name in dict.fromkeys(names)}


def disagreements(decision: PolicyDecision) -> dict[str, tuple[str, str]]:
    """Ladder layers whose applied precision is not their rung (`effective_rung`): layer -> (rung, applied)."""
    applied, outer = precision_of(decision), decision.recipe.name
    return {
        name: (rung, applied[name])
        for name, rung in ladder(decision).items()
        if applied[name] != effective_rung(rung, outer)
    }


def fp8_stats(decision: PolicyDecision, recipe_name: str, tensor: str) -> list[str]:
    """LogFp8TensorStats stats for one tensor of a layer quantized with `recipe_name` (FP8 recipes only)."""
    if recipe_name == NVFP4:
        raise ValueError("NVFP4 layers are watched by LogNvfp4TensorStats, not LogFp8TensorStats")
    version = te_version_tuple(decision.te_version)
    stats = (
        ["underflows%"]
        if version is not None and version < (2, 7)
        else ["underflows%", "scale_inv_min", "scale_inv_max", "mse"]
    )
    if recipe_name == "delayed" and len(stats) > 1:
        stats.insert(1, "overflows%")
    if decision.weights_without_stats and tensor == "weight":
        stats = [s for s in stats if s not in _NEEDS_HIGH_PRECISION]
    return stats


def nvfp4_stats(decision: PolicyDecision, tensor: str) -> list[str]:
    """LogNvfp4TensorStats stats for one tensor; both need the high-precision tensor (none for FP4 weights)."""
    if decision.weights_without_stats and tensor == "weight":
        return []
    return list(NVFP4_STATS)
