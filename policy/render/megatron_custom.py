"""Megatron-LM's per-GEMM precision through TE's CustomRecipe: precision-config matchers whose `custom_recipe_factory`
points at a `mix_*` factory of the te-recipe module the script writes beside the config (policy/render/te_recipe.py).

Belongs here: when that route applies, which modules take it, their configs and matchers, and the script lines that
write the module. Must not be here: the rest of the precision config and the flags (megatron.py).

Facts (NVIDIA/Megatron-LM main, 2026-08): megatron/core/extensions/transformer_engine.py `TEQuantizationRecipe`
takes `fp8_quantization_recipe: custom` / `fp4_quantization_recipe: custom` with `custom_recipe_factory` (a dotted
path resolved by megatron/core/fp8_utils.py `_resolve_callable_from_python_import_path`, built into
`CustomRecipe(qfactory=...)`); `override_nonquantized_autocast` (default false) lets a matcher quantize a module whose
surrounding context Megatron keeps in BF16 (`--first-last-layers-bf16`), `override_quantized_autocast` (default true)
one inside the outer recipe. Megatron passes no `name=` to TE modules, so the factory of one matcher gets roles
without names: one `mix_*` factory per distinct (fprop, dgrad, wgrad) mix needs none. HybridQuantizer and
QuantizerRole need TE >= 2.19 (#2817, #2620): the route is taken only when the run's TE version says so; otherwise
Megatron keeps an overridden module wholly in BF16, as before, and says how to keep only its GEMMs.
"""

from __future__ import annotations

from fp8_policy.policy.records import PolicyDecision
from fp8_policy.policy.render import grouped, te_recipe
from fp8_policy.policy.render.layout import merged_overrides, te_version_tuple

MIN_TE = (2, 19)
MODULE = te_recipe.MODULE
HEREDOC_END = "FP8_POLICY_RECIPE_EOF"


def available(te_version: str | None) -> bool:
    """TE >= 2.19 is known (HybridQuantizer, QuantizerRole)."""
    version = te_version_tuple(te_version)
    return version is not None and version >= MIN_TE


def custom_modules(decision: PolicyDecision, heads: set[str]) -> dict[str, te_recipe.Mix]:
    """Logged layer -> its (fprop, dgrad, wgrad) mix, for the GEMM overrides Megatron keeps exactly through a custom
    factory (not heads: no matcher reaches output_layer; not grouped experts: their module takes one config)."""
    if not available(decision.te_version):
        return {}
    mixes = te_recipe.layer_mixes(decision)
    return {
        name: mixes[name]
        for name in merged_overrides(decision)
        if name not in heads and grouped.split(name) is None and name in mixes
    }


def config_name(index: int) -> str:
    return f"custom_{index}"


def config_lines(custom: dict[str, te_recipe.Mix]) -> list[str]:
    """The `configs.custom_<k>` entries, one per distinct mix."""
    lines: list[str] = []
    for k, mix in enumerate(dict.fromkeys(custom.values())):
        key = "fp4_quantization_recipe" if "nvfp4" in mix else "fp8_quantization_recipe"
        lines += [
            f"  {config_name(k)}:  # fprop {mix[0]}, dgrad {mix[1]}, wgrad {mix[2]} (TE CustomRecipe)",
            "    transformer_engine_config_type: TEQuantizationParams",
            "    training_recipe:",
            f"      {key}: custom",
            f"      custom_recipe_factory: {MODULE}.{te_recipe.mix_factory_name(mix)}",
            "      override_nonquantized_autocast: true",
        ]
    return lines


def matcher_entries(custom: dict[str, te_recipe.Mix], paths: dict[str, str]) -> list[tuple[str, str, str]]:
    """(config, pattern, comment) per module, `paths` giving each layer's escaped module glob."""
    index = {mix: k for k, mix in enumerate(dict.fromkeys(custom.values()))}
    return [
        (config_name(index[mix]), paths[name], f"{name}: {'/'.join(_bf16(mix))} in BF16, the rest at {_low(mix)}")
        for name, mix in custom.items()
    ]


def script_lines(decision: PolicyDecision, body: str) -> list[str]:
    """The heredoc writing the te-recipe module (`body`) and the PYTHONPATH Megatron imports it from."""
    return [
        "",
        f"# {MODULE}.py: the TE CustomRecipe factories the precision config's custom matchers name (TE >= 2.19).",
        f"cat > {MODULE}.py <<'{HEREDOC_END}'",
        body.rstrip("\n"),
        HEREDOC_END,
        'export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"',
    ]


def _bf16(mix: te_recipe.Mix) -> list[str]:
    return [g for g, r in zip(("fprop", "dgrad", "wgrad"), mix, strict=True) if r == "bf16"]


def _low(mix: te_recipe.Mix) -> str:
    return next((r for r in mix if r != "bf16"), "bf16")
