"""Megatron-LM flags (and `--te-precision-config-file` YAML) for a `PolicyDecision`.

Belongs here: choosing between the first/last-layers-BF16 flags and a precision-config YAML, mapping logged layer
names to Megatron's 0-based `named_modules()` paths, recipe flags, and the bash text that carries both. Must not be
here: TE debug YAML, other dialects.

Conventions (Megatron-LM `--first-last-layers-bf16` / `--te-precision-config-file`, https://github.com/NVIDIA/Megatron-LM):
* Flags route: the layers Megatron must keep in BF16 (skipped, plus modules with per-GEMM overrides, which Megatron
  can only run whole in BF16) are exactly all logged layers of a contiguous run of body blocks at the start and/or
  end -> `--first-last-layers-bf16 --num-layers-at-start-in-bf16 N --num-layers-at-end-in-bf16 M`.
* Otherwise a precision-config YAML: one `bf16` TEQuantizationParams config (empty training_recipe)
  and `glob` matchers (fnmatch, first enabled match wins) over paths such as
  `decoder.layers.0.self_attention.linear_qkv`. A fully skipped block becomes `decoder.layers.<i>.*`.
* Logged indices come from TE's 1-based `layer_number` unless the smallest body index is 0 (see
  `layout`); Megatron's index is 0-based and local to a pipeline stage: under pipeline parallelism the matchers
  come from `megatron_pipeline` (a glob hits its local block on every stage; what it takes along is stated).
* Per-GEMM overrides cannot be expressed: the module is promoted to full BF16 (conservative; `--no-fp8-wgrad` is
  offered, commented, when every override is wgrad-only). MoE expert GEMMs of a TE GroupedLinear (`.gemm_<i>`)
  reach Megatron only as their whole TEGroupedLinear module, at its experts' most precise rung (grouped.py).
* Delayed scaling rejects transformer layers in BF16 (megatron/core/transformer/transformer_config.py): when a
  body-block layer is kept in BF16 the script uses `--fp8-recipe tensorwise` (current scaling) for the Megatron path
  and says why, exactly as the JSON `megatron` section does (policy/recommend/megatron.py); the recommended recipe
  stays delayed for the TE debug YAML, which keeps those layers in BF16 under it.
* NVFP4 (`NVFP4BlockScaling`): `--fp4-format e2m1 --fp4-recipe nvfp4` and never `--fp8-format` / `--fp8-recipe`
  (megatron/training/arguments.py: "--fp4-format and --fp8-format cannot be used simultaneously").
* Heads: Megatron's `output_layer` is not a TE module and runs in BF16 whatever the decision asks (the rules are in
  `megatron_head`): a ladder rung on a head is not emitted, `applied()` lists every head as BF16 and calls a head the
  decision runs in low precision an approximation, and a comment line says why.
* A per-layer precision ladder (`decision.layer_precisions` with rungs other than the outer recipe, see
  `precision`) always goes to the precision-config YAML: one TEQuantizationParams config per rung used
  (`fp4_quantization_recipe: nvfp4`, `fp8_quantization_recipe: mxfp8|blockwise|tensorwise` with `fp8_format`
  e4m3|hybrid, an empty `training_recipe` for BF16), BF16 matchers first, then one exact matcher per module
  (megatron/core/extensions/transformer_engine.py `TEQuantizationRecipe.parse_from_config`,
  megatron/core/quantization/quant_config.py `RecipeConfig`). A rung runs inside the outer autocast
  (`override_quantized_autocast` defaults to true), so layers at the outer recipe need no matcher.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import replace

from fp8_policy.policy.records import MEGATRON_RECIPES, LayerGroup, LayerInfo, PolicyDecision
from fp8_policy.policy.render import grouped, megatron_custom, megatron_head, megatron_pipeline, precision, te_recipe
from fp8_policy.policy.render.applied import AppliedPolicy, whole_module_overrides
from fp8_policy.policy.render.layout import (
    body_blocks,
    fp8_format,
    is_one_based,
    merged_overrides,
    module_index,
    split_at_index,
    strip_root,
)
from fp8_policy.policy.render.megatron_flags import (
    FP4_FLAGS,
    megatron_recipe_name,
    recipe_flags,
)
from fp8_policy.policy.render.options import RenderedPolicy, RenderOptions
from fp8_policy.policy.render.te_yaml import unapplied_note
from fp8_policy.policy.vocabulary import MEDIA_TYPES

MEDIA_TYPE = MEDIA_TYPES["megatron"]
FILENAME = "megatron_fp8_policy.sh"
HEREDOC_END = "FP8_POLICY_EOF"

MEGATRON_SUBLAYERS = {
    "qkv": "self_attention.linear_qkv",
    "proj": "self_attention.linear_proj",
    "fc1": "mlp.linear_fc1",
    "fc2": "mlp.linear_fc2",
}
# Leaf names of the common families (TE attribute paths, TE `name=` propagation, Megatron, HF).
_KIND = {
    **dict.fromkeys(
        ("qkv", "layernorm_qkv", "linear_qkv", "layernorm_linear_qkv", "query_key_value", "q_proj", "k_proj", "v_proj"),
        "qkv",
    ),
    **dict.fromkeys(("proj", "linear_proj", "o_proj", "out_proj"), "proj"),
    **dict.fromkeys(("fc1", "linear_fc1", "gate_proj", "up_proj"), "fc1"),
    **dict.fromkeys(("fc2", "linear_fc2", "down_proj"), "fc2"),
}
# ladder rung -> (TEQuantizationRecipe key, Megatron recipe name); delayed never gets a config (kept BF16 instead)
RUNG_RECIPES = {
    "nvfp4": ("fp4_quantization_recipe", "nvfp4"),
    "mxfp8": ("fp8_quantization_recipe", "mxfp8"),
    "block": ("fp8_quantization_recipe", "blockwise"),
    "current": ("fp8_quantization_recipe", "tensorwise"),
}
GROUPED_WHY = "Megatron's TEGroupedLinear takes one precision config for all its experts"


def glob_escape(text: str) -> str:
    """Make fnmatch treat `*`, `?` and `[` literally."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def megatron_path(layer: LayerInfo, one_based: bool) -> str:
    """The GPTModel `named_modules()` path of a logged layer (0-based block, no wrappers; `.gemm_<i>`: grouped.py)."""
    return grouped.module_of(_module_path(layer, one_based))


def _module_path(layer: LayerInfo, one_based: bool) -> str:
    structure = layer.structure
    if structure.group is LayerGroup.HEAD:
        return "output_layer"
    stripped = strip_root(layer.name)
    if structure.group is not LayerGroup.BODY or structure.index is None:
        return stripped
    block = f"decoder.layers.{module_index(structure.index, one_based)}"
    split = split_at_index(stripped, structure.index)
    if split and (split[0] == "decoder.layers" or split[0].endswith(".decoder.layers")):
        return f"{block}.{split[1]}"  # already a Megatron name: keep the sublayer path
    kind = _KIND.get(structure.sublayer or "") or _KIND.get(layer.name.rsplit(".", 1)[-1])
    if kind:
        return f"{block}.{MEGATRON_SUBLAYERS[kind]}"
    return f"{block}.{split[1] if split else stripped}"


def applied(decision: PolicyDecision) -> AppliedPolicy:
    """Skipped layers exact (flags or matchers); overridden modules wholly in BF16; every head in BF16 (Megatron's
    output_layer is no TE module, `megatron_head`), an approximation where the decision runs it in low precision;
    under pipeline parallelism what the precision-config globs take along (`megatron_pipeline.applied`)."""
    custom = _custom(decision)  # kept exactly through TE CustomRecipe factories (megatron_custom.py)
    rest = replace(decision, gemm_overrides=tuple(o for o in decision.gemm_overrides if o.layer not in custom))
    base = whole_module_overrides(rest, "megatron", "Megatron keeps whole modules, not single GEMMs, in BF16")
    layers = grouped.whole_module_bf16(decision, (*base.bf16_layers, *megatron_head.heads(decision)))
    heads = megatron_head.approximation(megatron_head.low_precision_heads(decision))
    experts = grouped.approximation(decision, GROUPED_WHY)
    parts = [part.rstrip(".") for part in (base.approximation, heads, experts) if part]
    gemms = {name: g for name, g in merged_overrides(decision).items() if name in custom}
    result = AppliedPolicy("megatron", layers, gemms, (), "; ".join(parts) + "." if parts else None)
    return megatron_pipeline.applied(result, decision, staged_globs(decision), edge_block_counts)


def staged_globs(decision: PolicyDecision) -> megatron_pipeline.StageGlobs | None:
    """The precision-config matchers of a pipeline-parallel job (None without a pipeline placement)."""
    one_based = is_one_based(decision)
    return megatron_pipeline.stage_globs(decision, lambda layer: megatron_path(layer, one_based), glob_escape)


def _skipped(decision: PolicyDecision) -> list[str]:
    """Skipped layers that need a Megatron setting: heads run in BF16 without one (`megatron_head`)."""
    heads = set(megatron_head.heads(decision))
    return [name for name in precision.whole_bf16_layers(decision) if name not in heads]


def _overrides(decision: PolicyDecision) -> dict[str, tuple[str, ...]]:
    """GEMM overrides that need a Megatron setting (heads left out, as in `_skipped`)."""
    heads, custom = set(megatron_head.heads(decision)), _custom(decision)
    return {name: gemms for name, gemms in merged_overrides(decision).items() if name not in heads | set(custom)}


def _custom(decision: PolicyDecision) -> dict[str, te_recipe.Mix]:
    return megatron_custom.custom_modules(decision, set(megatron_head.heads(decision)))


def edge_block_counts(decision: PolicyDecision) -> tuple[int, int] | None:
    """(N, M) when the layers Megatron keeps in BF16 are exactly those of the first N and last M body blocks."""
    blocks = body_blocks(decision)
    skipped = set(_skipped(decision)) | set(_overrides(decision))
    if not skipped or not blocks:
        return None
    indices = list(blocks)
    if indices != list(range(indices[0], indices[0] + len(indices))):
        return None  # gaps in the logged numbering: start/end are ambiguous
    full = [i for i in indices if set(blocks[i]) <= skipped]
    if {name for i in full for name in blocks[i]} != skipped:
        return None
    start = next((n for n, i in enumerate(indices) if i not in full), len(indices))
    end = next((n for n, i in enumerate(reversed(indices[start:])) if i not in full), len(indices) - start)
    return (start, end) if start + end == len(full) else None


def _matchers(decision: PolicyDecision, one_based: bool) -> list[tuple[str, str]]:
    """(pattern, comment) per bf16 matcher: whole blocks, single skipped modules, then overrides."""
    staged = staged_globs(decision)
    if staged is not None:
        return staged.bf16
    info = {layer.name: layer for layer in decision.layers}
    skipped = _skipped(decision)
    whole = {i: names for i, names in body_blocks(decision).items() if set(names) <= set(skipped)}
    in_whole = {name for names in whole.values() for name in names}
    out = [
        (
            glob_escape(f"decoder.layers.{module_index(i, one_based)}.") + "*",
            f"logged block {i}: all {len(names)} logged layer(s) skipped",
        )
        for i, names in whole.items()
    ]
    for name in skipped:
        if name not in in_whole:
            path = megatron_path(info[name], one_based) if name in info else grouped.module_of(strip_root(name))
            whole_group = f"; {GROUPED_WHY}: all its experts run BF16" if grouped.split(name) else ""
            out.append((glob_escape(path), f"{name}: skipped{whole_group}"))
    for name, gemms in _overrides(decision).items():
        path = megatron_path(info[name], one_based) if name in info else grouped.module_of(strip_root(name))
        note = f"{name}: {'/'.join(gemms)} requested in high precision; whole module kept in BF16"
        out.append((glob_escape(path), note))
    unique: dict[str, str] = {}
    for pattern, comment in out:
        unique.setdefault(pattern, comment)
    return list(unique.items())


def _rung_matchers(decision: PolicyDecision, one_based: bool) -> list[tuple[str, str, str]]:
    """(config, pattern, comment) for the ladder layers that run under another recipe than the outer one (heads
    left out: no matcher reaches Megatron's output_layer, see `megatron_head`)."""
    staged = staged_globs(decision)
    if staged is not None:
        return staged.rungs
    info = {layer.name: layer for layer in decision.layers}
    heads = set(megatron_head.heads(decision))
    modules = grouped.group_precisions(decision)  # a grouped module runs whole at its experts' most precise rung
    out = []
    done: set[str] = set()
    for name, rung in precision.layer_recipes(decision).items():
        module = grouped.module_of(name)
        if name in heads or module in done:
            continue
        path = megatron_path(info[name], one_based) if name in info else grouped.module_of(strip_root(name))
        if module in modules:
            done.add(module)
            rung = modules[module]
            if rung in (precision.BF16, decision.recipe.name):
                continue  # a BF16 matcher reaches it, or it runs at the outer recipe
            comment = f"{module}: {rung} for all its experts (TEGroupedLinear: one config per module)"
        else:
            comment = f"{name}: {rung} (precision ladder)"
        out.append((rung, glob_escape(path), comment))
    return out


def _rung_config(decision: PolicyDecision, rung: str) -> list[str]:
    """The `configs.<rung>` lines of one ladder rung."""
    key, name = RUNG_RECIPES[rung]
    lines = [f"  {rung}:", "    transformer_engine_config_type: TEQuantizationParams", "    training_recipe:"]
    lines += [f"      {key}: {name}", "      override_nonquantized_autocast: true"]
    if key == "fp8_quantization_recipe":
        outer_fp8 = decision.recipe.name not in ("nvfp4",)
        lines.append(f"      fp8_format: {fp8_format(decision.recipe).lower() if outer_fp8 else 'e4m3'}")
    return lines


def _info(decision: PolicyDecision) -> dict[str, LayerInfo]:
    return {layer.name: layer for layer in decision.layers}


def _yaml_quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def precision_config_yaml(decision: PolicyDecision) -> str:
    """The `--te-precision-config-file` YAML text (hand-emitted to keep per-matcher comments)."""
    one_based = is_one_based(decision)
    numbering = "1-based TE layer_number -> index - 1" if one_based else "0-based list index, kept"
    lines = [
        "# Megatron --te-precision-config-file generated by fp8-policy.",
        "# Matchers are fnmatch globs over GPTModel.named_modules() paths (no DDP `module.` levels);",
        f"# block index is 0-based (logged names: {numbering}); {megatron_pipeline.scope(decision)}",
        "# Non-Megatron names are translated (qkv -> self_attention.linear_qkv, proj -> self_attention.linear_proj,",
        "# fc1 -> mlp.linear_fc1, fc2 -> mlp.linear_fc2): check them against named_modules(). No matcher names a head:",
        "# output_layer is no TE module, Megatron runs it in BF16 whatever this file says.",
    ]
    overrides = _overrides(decision)
    if overrides:
        lines.append(
            "# Without a TE CustomRecipe (TE >= 2.19: the te-recipe format) Megatron cannot keep single GEMMs of a"
        )
        lines.append(
            "# module in BF16: modules with per-GEMM overrides are approximated by running them wholly in BF16."
        )
        if all(gemms == ("wgrad",) for gemms in overrides.values()):
            lines.append("# Alternative: drop those matchers and pass --no-fp8-wgrad (wgrad in BF16 for EVERY layer).")
    bf16 = _matchers(decision, one_based)
    rungs = _rung_matchers(decision, one_based)
    if _custom(decision):
        lines.append(
            f"# custom_* configs keep single GEMMs in BF16 through {megatron_custom.MODULE}.py (TE CustomRecipe)."
        )
    if rungs:
        lines.append("# Per-layer precision ladder: the modules below run under their own recipe inside the outer")
        lines.append("# autocast; BF16 matchers come first, so a module kept in BF16 never gets a cheaper recipe.")
    lines.append("configs:")
    if bf16:
        lines += ["  bf16:", "    transformer_engine_config_type: TEQuantizationParams", "    training_recipe: {}"]
    for rung in precision.PRECISION_ORDER:
        if any(config == rung for config, _, _ in rungs):
            lines += _rung_config(decision, rung)
    custom, info = _custom(decision), _info(decision)
    lines += [*megatron_custom.config_lines(custom), "matchers:"]
    paths = {name: glob_escape(megatron_path(info[name], one_based)) for name in custom}
    entries = [("bf16", pattern, comment) for pattern, comment in bf16] + rungs
    entries += megatron_custom.matcher_entries(custom, paths)
    counters: dict[str, int] = {}
    for config, pattern, comment in entries:
        n = counters[config] = counters.get(config, -1) + 1
        lines += [
            f"  # {comment}",
            f"  {config}_{n:03d}:",
            f"    config: {config}",
            "    type: glob",
            f"    pattern: {_yaml_quote(pattern)}",
            "    enabled: true",
        ]
    return "\n".join(lines) + "\n"


def _header(decision: PolicyDecision, edges: tuple[int, int] | None) -> list[str]:
    recipe = decision.recipe
    if recipe.name == "nvfp4":
        recipe_line = (
            f"# FP4 recipe: nvfp4 ({recipe.class_path}) -> {' '.join(FP4_FLAGS)} (never with --fp8-format /"
            " --fp8-recipe: Megatron refuses FP4 and FP8 together)"
        )
    else:
        recipe_line = (
            f"# FP8 recipe: {recipe.name} ({recipe.class_path}) -> --fp8-recipe"
            f" {MEGATRON_RECIPES[megatron_recipe_name(decision)]}"
        )
    lines = [
        "#!/usr/bin/env bash",
        "# Megatron-LM FP8 policy generated by fp8-policy.",
        f"# {applied(decision).statement()}",
        recipe_line,
        '# Append to the training command: pretrain_gpt.py ... "${FP8_POLICY_ARGS[@]}"',
    ]
    if not _skipped(decision) and not _overrides(decision):
        lines.append("# No layer needs BF16: every transformer block stays in FP8.")
    asked = {*precision.whole_bf16_layers(decision), *merged_overrides(decision)}
    kept_heads = [name for name in megatron_head.heads(decision) if name in asked]  # no matcher for them
    if kept_heads:
        lines.append(
            f"# Head layer(s) {kept_heads} stay BF16 as asked: Megatron runs output_layer in BF16, no flag needed."
        )
    if edges:
        lines.append(f"# Keeps the first {edges[0]} and last {edges[1]} transformer block(s) in BF16.")
        if _overrides(decision):
            lines.append(
                "# Per-GEMM overrides are approximated by whole modules in BF16 (Megatron cannot keep single"
                " GEMMs in BF16); the TE debug YAML keeps only the requested GEMMs in BF16."
            )
    return lines


def _args_block(flags: list[str]) -> list[str]:
    pairs: list[str] = []
    for token in flags:
        if token.startswith("--") or not pairs:
            pairs.append(shlex.quote(token))
        else:
            pairs[-1] += " " + shlex.quote(token)
    return ["FP8_POLICY_ARGS=(", *[f"  {pair}" for pair in pairs], ")"]


def render(decision: PolicyDecision, options: RenderOptions) -> RenderedPolicy:
    """Bash text: optional heredoc writing the precision-config YAML, then the FP8_POLICY_ARGS array."""
    mixed = bool(_rung_matchers(decision, is_one_based(decision))) or bool(_custom(decision))
    edges = None if mixed else edge_block_counts(decision)
    flags, comments = recipe_flags(decision)
    lines = _header(decision, edges) + comments + unapplied_note(decision)
    lines += [
        f"# {line}" for line in megatron_head.note(megatron_head.low_precision_heads(decision), decision.recipe.name)
    ]
    if decision.fp8_param and (mixed or not edges):
        lines.append(
            "# NOTE: the run keeps FP8/FP4 parameters; check --fp8-param-gather / --fp4-param-gather against the"
            " precision config (Megatron does not yet validate the two together)."
        )
    if edges:
        flags += [
            "--first-last-layers-bf16",
            "--num-layers-at-start-in-bf16",
            str(edges[0]),
            "--num-layers-at-end-in-bf16",
            str(edges[1]),
        ]
    elif mixed or _skipped(decision) or _overrides(decision):
        path = options.precision_config_file
        lines += [
            "",
            f"cat > {shlex.quote(path)} <<'{HEREDOC_END}'",
            precision_config_yaml(decision).rstrip("\n"),
            HEREDOC_END,
        ]
        flags += ["--te-precision-config-file", path]
    if _custom(decision):
        lines += megatron_custom.script_lines(decision, te_recipe.render(decision, options).content)
    lines += ["", *_args_block(flags)]
    return RenderedPolicy(content="\n".join(lines) + "\n", media_type=MEDIA_TYPE, filename=FILENAME)
