"""The `megatron` section of a recommendation (JSON values only; CLI rendering lives in the renderers).

Rules (fp8-log-format.md §4.3):
* `first_last_layers_bf16` is true only when the body blocks holding BF16 layers (skipped, or already BF16 in the
  run: the flags describe the whole next run) form a contiguous run from the first block and/or to the last.
  Megatron then runs whole transformer layers in BF16: `layer_no < num_layers_at_start_in_bf16` or
  `layer_no >= num_layers - num_layers_at_end_in_bf16` (0-based).
  `exact` says whether those whole blocks hold only BF16 layers (false: healthy sublayers go to BF16 too).
* Blocks outside such runs need `--te-precision-config-file` (globs on 0-based module paths); GEMM overrides need
  the TE debug-API YAML; heads are not Megatron transformer layers: `output_layer` precision is separate.
* `fp8_recipe` uses Megatron's names (delayed | tensorwise | blockwise | mxfp8); delayed never comes with
  first/last BF16 (Megatron raises a ValueError), the recipe choice already switched it.
"""

from __future__ import annotations

from typing import Any

from policy.analysis.layout import LayerLevels, LayerStatus, Layout
from policy.records import MEGATRON_RECIPES, LayerGroup, RecipeChoice
from policy.recommend.skiplist import SkipPlan


def _runs(blocks: list[int], skipped: set[int]) -> tuple[int, int]:
    start = next((i for i, b in enumerate(blocks) if b not in skipped), len(blocks))
    end = next((i for i, b in enumerate(reversed(blocks)) if b not in skipped), len(blocks))
    if start == len(blocks):
        end = 0  # every block skipped: express it once, from the start
    return start, end


def megatron_section(layout: Layout, plan: SkipPlan, recipe: RecipeChoice) -> dict[str, Any]:
    levels = layout.levels
    skipped_layers = [levels[name] for name in plan.bf16_layers if name in levels]
    skipped_blocks = {lv.block for lv in skipped_layers if lv.block is not None}
    start, end = _runs(layout.blocks, skipped_blocks)
    edge_blocks = set(layout.blocks[:start]) | (set(layout.blocks[len(layout.blocks) - end:]) if end else set())
    first_last = bool(skipped_blocks) and skipped_blocks <= edge_blocks
    if not first_last:
        start = end = 0
    extra = _extra_layers(levels.values(), edge_blocks if first_last else set(), set(plan.bf16_layers))
    outside = sorted(skipped_blocks - edge_blocks) if first_last else sorted(skipped_blocks)
    heads = [lv.name for lv in skipped_layers if lv.info.structure.group is LayerGroup.HEAD]
    fp8_format = "e4m3" if recipe.kwargs.get("fp8_format") == "E4M3" else "hybrid"
    args = ["--fp8-format", fp8_format, "--fp8-recipe", MEGATRON_RECIPES[recipe.name]]
    if recipe.name == "delayed":
        args += ["--fp8-amax-history-len", str(recipe.kwargs.get("amax_history_len", 1024)),
                 "--fp8-amax-compute-algo", str(recipe.kwargs.get("amax_compute_algo", "max"))]
    if first_last:
        args += ["--first-last-layers-bf16", "--num-layers-at-start-in-bf16", str(start),
                 "--num-layers-at-end-in-bf16", str(end)]
    if outside:
        args += ["--te-precision-config-file", "fp8_precision.yaml"]
    return {
        "first_last_layers_bf16": first_last,
        "num_layers_at_start_in_bf16": start,
        "num_layers_at_end_in_bf16": end,
        "fp8_recipe": MEGATRON_RECIPES[recipe.name],
        "fp8_format": fp8_format,
        "extra_args": args,
        "exact": first_last and not extra,
        "extra_bf16_layers": extra,
        "blocks_needing_precision_config": [b - layout.index_base for b in outside],
        "notes": _notes(layout, first_last, extra, outside, heads, plan),
    }


def _extra_layers(levels: Any, blocks: set[int], skips: set[str]) -> list[str]:
    """FP8 layers that whole-block BF16 would add beyond the skip list."""
    return [lv.name for lv in levels if isinstance(lv, LayerLevels) and lv.block in blocks
            and lv.status in (LayerStatus.FP8, LayerStatus.UNOBSERVED) and lv.name not in skips]


def _notes(layout: Layout, first_last: bool, extra: list[str], outside: list[int], heads: list[str],
           plan: SkipPlan) -> list[str]:
    notes = ["Counts are whole transformer layers from the first/last (Megatron layer_no is 0-based); heads are "
             "not transformer layers: output_layer precision is set separately."]
    if layout.index_base == 1:
        notes.append("Logged block numbers are 1-based (TE layer_number); Megatron module paths are 0-based.")
    if first_last and extra:
        notes.append(f"--first-last-layers-bf16 also puts {len(extra)} healthy sublayer(s) of those blocks in "
                     "BF16; use the precision config for the exact list.")
    if outside:
        notes.append(f"Blocks {outside} (0-based {[b - layout.index_base for b in outside]}) are not contiguous "
                     "with the first/last layers: they need --te-precision-config-file matchers.")
    if heads:
        notes.append(f"Head layer(s) {heads} stay BF16 through their own setting, not the first/last flags.")
    if plan.overrides:
        notes.append(f"{len(plan.overrides)} GEMM override(s) need the TE debug API YAML "
                     "(DisableFP8GEMM / DisableQuantizationGEMM); Megatron flags cannot express them.")
    return notes
