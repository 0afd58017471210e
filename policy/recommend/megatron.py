"""The `megatron` section of a recommendation (JSON values only; CLI rendering lives in the renderers).

Rules (Megatron-LM arguments and transformer_config, https://github.com/NVIDIA/Megatron-LM):
* The layers Megatron must keep in BF16 are the skipped ones, those already BF16 in the run (the flags describe
  the whole next run) and those with GEMM overrides (Megatron can only run a whole module in BF16).
* `first_last_layers_bf16` covers only WHOLE blocks: a contiguous run, from the first block and/or to the last,
  of blocks whose every GEMM layer is in that set. Megatron then runs them in BF16:
  `layer_no < num_layers_at_start_in_bf16` or `layer_no >= num_layers - num_layers_at_end_in_bf16` (0-based).
  A block only partly in BF16 goes to `--te-precision-config-file` (module globs, 0-based paths) instead of the
  flags, so the flags never move a healthy sublayer to BF16 (a wider BF16 region moves the boundary effect and
  converged worse in bionemo's FL2/FL4 comparison, OG2-7B, bionemo-framework fp8_analysis).
* Heads are not Megatron transformer layers, and Megatron runs `output_layer` in BF16 whatever is asked (a plain
  ColumnParallelLinear no flag or precision-config matcher reaches: policy/render/megatron_head.py): a ladder rung
  on a head is left out of the config, and a head the plan runs in low precision (its rung, or the outer recipe)
  gets the same note as the script's; `formats.megatron` lists it as BF16, an approximation.
* `fp8_recipe` uses Megatron's names (delayed | tensorwise | blockwise | mxfp8); delayed never comes with
  a transformer-block layer in BF16 (Megatron raises "Delayed scaling does not support first / last layer in
  BF16"): the section then uses tensorwise (current scaling) for the Megatron path only and says so in `notes`;
  the recommended recipe stays delayed for the TE debug YAML, which keeps those layers in BF16 under it.
* NVFP4: `fp4_format` e2m1 / `fp4_recipe` nvfp4 and `--fp4-format e2m1 --fp4-recipe nvfp4`; `fp8_recipe` and
  `fp8_format` are null and no `--fp8-*` flag is emitted (megatron/training/arguments.py refuses FP4 with FP8).
* `layer_precisions` (the ladder) with rungs other than the outer recipe need `--te-precision-config-file`
  (policy/render/megatron.py writes it); the first/last flags are then left to that file as well. So do GEMM
  overrides when the run's TE has CustomRecipe (>= 2.19): custom matchers keep single GEMMs in BF16
  (policy/render/megatron_custom.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fp8_policy.policy.analysis.layout import LayerStatus, Layout
from fp8_policy.policy.recommend.skiplist import SkipPlan
from fp8_policy.policy.records import MEGATRON_RECIPES, LayerGroup, LayerPrecision, RecipeChoice
from fp8_policy.policy.render import megatron_head
from fp8_policy.policy.render.megatron_custom import available
from fp8_policy.policy.render.options import RenderOptions
from fp8_policy.policy.render.precision import effective_rung

FP4_ARGS = ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"]


def _runs(blocks: list[int], skipped: set[int]) -> tuple[int, int]:
    start = next((i for i, b in enumerate(blocks) if b not in skipped), len(blocks))
    end = next((i for i, b in enumerate(reversed(blocks)) if b not in skipped), len(blocks))
    if start == len(blocks):
        end = 0  # every block skipped: express it once, from the start
    return start, end


def _ladder_mix(
    layer_precisions: Sequence[LayerPrecision], recipe: RecipeChoice, kept: set[str], heads: Sequence[str]
) -> tuple[list[str], dict[str, str]]:
    """Ladder layers outside the plan's BF16 set at a low-precision rung other than the outer recipe (the rules of
    policy/render/precision.py: the plan's BF16 wins, bf16 rungs outside it are not applied, a delayed rung runs at
    the outer FP8 recipe or, under NVFP4, at current scaling), and apart every one of the `heads` outside the BF16
    set -> the precision the plan asks for it (its rung, else the outer recipe; Megatron runs it in BF16)."""
    rungs = {lp.layer: effective_rung(lp.precision, recipe.name) for lp in layer_precisions}
    out = [
        name
        for name, rung in rungs.items()
        if name not in kept and name not in heads and rung not in ("bf16", recipe.name)
    ]
    low = {name: rungs.get(name, "bf16") for name in heads if name not in kept}
    return out, {name: recipe.name if rung == "bf16" else rung for name, rung in low.items()}


def megatron_section(
    layout: Layout,
    plan: SkipPlan,
    recipe: RecipeChoice,
    layer_precisions: Sequence[LayerPrecision] = (),
    te_version: str | None = None,
) -> dict[str, Any]:
    levels = layout.levels
    bf16 = {*plan.bf16_layers, *(o.layer for o in plan.overrides)}
    members: dict[int, list[str]] = {}
    for lv in levels.values():
        if lv.block is not None and lv.status is not LayerStatus.IGNORED:
            members.setdefault(lv.block, []).append(lv.name)
    bf16_blocks = {block for block, names in members.items() if any(name in bf16 for name in names)}
    full_blocks = {block for block, names in members.items() if all(name in bf16 for name in names)}
    heads_all = [n for n, lv in levels.items() if lv.info.structure.group is LayerGroup.HEAD]
    ran_bf16 = {n for n, lv in levels.items() if lv.status is LayerStatus.BF16}
    mix, low_heads = _ladder_mix(layer_precisions, recipe, bf16 | ran_bf16, heads_all)
    # GEMM overrides kept as single GEMMs through TE CustomRecipe factories (render/megatron_custom.py)
    custom = [o.layer for o in plan.overrides if o.layer not in heads_all] if available(te_version) else []
    start, end = (0, 0) if mix or custom else _runs(layout.blocks, full_blocks)
    edge_blocks = set(layout.blocks[:start]) | (set(layout.blocks[len(layout.blocks) - end :]) if end else set())
    first_last = bool(edge_blocks)
    outside = sorted(bf16_blocks - edge_blocks)
    asked = {*plan.skip_layers, *(o.layer for o in plan.overrides)}  # not the heads that ran in BF16 already
    heads = [n for n in sorted(asked) if n in levels and levels[n].info.structure.group is LayerGroup.HEAD]
    fp4 = recipe.name == "nvfp4"
    fp8_format = None if fp4 else ("e4m3" if recipe.kwargs.get("fp8_format") == "E4M3" else "hybrid")
    megatron_recipe = "current" if recipe.name == "delayed" and bf16_blocks else recipe.name
    fp8_recipe = None if fp4 else MEGATRON_RECIPES[megatron_recipe]
    args = list(FP4_ARGS) if fp4 else ["--fp8-format", str(fp8_format), "--fp8-recipe", str(fp8_recipe)]
    if megatron_recipe == "delayed":
        args += [
            "--fp8-amax-history-len",
            str(recipe.kwargs.get("amax_history_len", 1024)),
            "--fp8-amax-compute-algo",
            str(recipe.kwargs.get("amax_compute_algo", "max")),
        ]
    if first_last:
        args += [
            "--first-last-layers-bf16",
            "--num-layers-at-start-in-bf16",
            str(start),
            "--num-layers-at-end-in-bf16",
            str(end),
        ]
    if outside or mix or custom:
        args += ["--te-precision-config-file", RenderOptions().precision_config_file]  # the file the script writes
    notes = _notes(layout, outside, heads, plan, bool(custom))
    if megatron_recipe != recipe.name:
        notes.append(
            f"Megatron path only: --fp8-recipe {fp8_recipe} (current scaling), because Megatron rejects delayed "
            "scaling with transformer layers in BF16 (transformer_config.py); the recommended recipe stays delayed "
            "for the TE debug YAML, which keeps these layers in BF16 under it."
        )
    if fp4:
        notes.append("NVFP4: --fp4-format e2m1 --fp4-recipe nvfp4; Megatron refuses --fp8-format together with FP4.")
    notes += megatron_head.note(low_heads, recipe.name)
    if mix:
        notes.append(
            f"{len(mix)} layer(s) of the precision ladder run under another recipe than the outer one: the "
            "precision config file (format megatron) carries them with the BF16 layers; no first/last flags."
        )
    section: dict[str, Any] = {
        "first_last_layers_bf16": first_last,
        "num_layers_at_start_in_bf16": start,
        "num_layers_at_end_in_bf16": end,
        "fp8_recipe": fp8_recipe,
        "fp8_format": fp8_format,
        "extra_args": args,
        "blocks_needing_precision_config": [b - layout.index_base for b in outside],
        "notes": notes,
    }
    if fp4:
        section |= {"fp4_format": "e2m1", "fp4_recipe": "nvfp4"}
    return section


def _notes(layout: Layout, outside: list[int], heads: list[str], plan: SkipPlan, custom: bool) -> list[str]:
    notes = [
        "Counts are whole transformer layers from the first/last (Megatron layer_no is 0-based); heads are "
        "not transformer layers: Megatron runs output_layer in BF16 whatever the flags say."
    ]
    if layout.index_base == 1:
        notes.append("Logged block numbers are 1-based (TE layer_number); Megatron module paths are 0-based.")
    if outside:
        notes.append(
            f"Blocks {outside} (0-based {[b - layout.index_base for b in outside]}) are not whole BF16 "
            "blocks at the start or end: they need --te-precision-config-file matchers."
        )
    if heads:
        notes.append(f"Head layer(s) {heads} stay BF16 as asked: Megatron runs output_layer in BF16, no flag needed.")
    if plan.overrides and custom:
        notes.append(
            f"{len(plan.overrides)} GEMM override(s) keep only those GEMMs in BF16: the precision config's custom "
            "matchers name the fp8_policy_recipe.mix_* factories the script writes (TE CustomRecipe, TE >= 2.19)."
        )
    elif plan.overrides:
        notes.append(
            f"{len(plan.overrides)} GEMM override(s) are kept as whole modules in BF16 here: Megatron "
            "cannot keep single GEMMs in BF16. The TE debug API YAML (DisableFP8GEMM / "
            "DisableQuantizationGEMM) keeps only those GEMMs in BF16."
        )
    return notes
