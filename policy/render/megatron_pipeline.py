"""Megatron-LM's `--te-precision-config-file` under pipeline parallelism: which global blocks each glob really hits.

Belongs here: `stage_globs` (the matchers of a pipeline-parallel job: one per local module path, each at the most
precise precision any block it hits needs), the approximation it states, and the notes of the JSON `megatron`
section. Must not be here: the flags, the script and the non-pipeline matchers (megatron.py), the stage arithmetic
(policy/parallel/stages.py). megatron.py calls in here with its own path and escape functions (no import back).

Rules (Megatron-LM, https://github.com/NVIDIA/Megatron-LM):
* Every process reads the same precision-config file, and its glob matchers run over the stage's own
  `named_modules()` (megatron/core/models/gpt/gpt_model.py, `get_quant_config_or_none(name, ...)`), whose block
  index is the ModuleList position on that stage (megatron/core/transformer/transformer_block.py, `_build_layers`):
  `*decoder.layers.3.*` hits local block 3 of EVERY stage (and of every virtual-pipeline chunk). No matcher can pick
  one stage's block.
* So under pipeline parallelism a matcher is emitted per local module path, at the most precise precision any block
  it hits needs (BF16 over any rung, a rung over the outer recipe, by the ladder's order): no block ever runs less
  precisely than the policy asks. The layers it takes along are listed (`extra_bf16_layers`; more precise rungs in
  the approximation), and the rendering is exact only when no glob hits another block than requested.
* `--first-last-layers-bf16` / `--num-layers-at-start-in-bf16` / `--num-layers-at-end-in-bf16` count GLOBAL blocks
  (Megatron tests them against the layer's global number), so the edge route stays exact under pipeline parallelism.
* What reaches exactly one global block: the TE debug YAML (TE's debug API names Megatron's blocks by their global
  `layer_number`; Megatron-Bridge's tensor_inspect loads such a file), per stage when the logs named blocks locally,
  or a custom recipe factory (TE `CustomRecipe`, Megatron `--custom-recipe`) that reads
  `parallel_state.get_pipeline_model_parallel_rank()`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from fp8_policy.policy.parallel.naming import LOCAL
from fp8_policy.policy.parallel.stages import block_home, rank_chunks
from fp8_policy.policy.records import PRECISIONS, LayerGroup, LayerInfo, PolicyDecision
from fp8_policy.policy.render import megatron_head, precision
from fp8_policy.policy.render.applied import AppliedPolicy
from fp8_policy.policy.render.layout import merged_overrides
from fp8_policy.policy.render.pipeline import Placement, placement, qualify

BF16 = "bf16"
_BLOCK = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")
_ORDER = {precision: i for i, precision in enumerate(PRECISIONS)}  # cheapest first: a higher index is more precise


@dataclass(frozen=True, slots=True)
class StageGlobs:
    """The matchers of a pipeline-parallel job and what they take along."""

    bf16: list[tuple[str, str]]  # (pattern, comment)
    rungs: list[tuple[str, str, str]]  # (config, pattern, comment)
    extra_bf16: tuple[str, ...]  # layers the globs keep in BF16 beyond the request
    raised: tuple[str, ...]  # layers the globs run at a more precise rung than the ladder asks
    taken_along: dict[int, tuple[int, ...]]  # requested global block -> other global blocks its matchers hit

    @property
    def exact(self) -> bool:
        return not self.taken_along


@dataclass(slots=True)
class _Entry:
    name: str
    block: int  # global, 0-based
    need: str  # bf16 | a ladder rung | the outer recipe


def stage_globs(
    decision: PolicyDecision, path_of: Callable[[LayerInfo], str], escape: Callable[[str], str]
) -> StageGlobs | None:
    """The matchers of a pipeline-parallel job (module docstring): skipped layers, modules with GEMM overrides (whole
    in BF16) and ladder rungs, heads left out as megatron.py leaves them (no matcher reaches Megatron's output_layer,
    megatron_head.py); `path_of` is a layer's global `named_modules()` path. None without a pipeline placement."""
    where = placement(decision)
    if where is None:
        return None
    heads = set(megatron_head.heads(decision))
    skipped = [name for name in precision.skipped_layers(decision) if name not in heads]
    overrides = {name: g for name, g in merged_overrides(decision).items() if name not in heads}
    rungs = {name: rung for name, rung in precision.layer_recipes(decision).items() if name not in heads}
    outer = decision.recipe.name
    bf16 = {*skipped, *overrides}
    by_path: dict[str, list[_Entry]] = {}
    by_local: dict[int, list[_Entry]] = {}
    loose: list[tuple[str, str]] = []  # requested layers outside a block (no stage to tell apart)
    for layer in decision.layers:
        need = BF16 if layer.name in bf16 else rungs.get(layer.name, outer)
        path = path_of(layer)
        found = _BLOCK.match(path) if layer.structure.group is LayerGroup.BODY else None
        if found is None:
            if need != outer:
                loose.append((layer.name, path))
            continue
        block = int(found[1])
        _pp, _vp, local = block_home(where.layout, block)
        entry = _Entry(layer.name, block, need)
        by_path.setdefault(f"decoder.layers.{local}.{found[2]}", []).append(entry)
        by_local.setdefault(local, []).append(entry)
    whole = {j for j, entries in by_local.items() if all(e.name in skipped for e in entries)}
    out_bf16 = [
        (escape(f"decoder.layers.{j}.") + "*", _comment(where, j, by_local[j], "all logged layer(s) skipped"))
        for j in sorted(whole)
    ]
    out_rungs: list[tuple[str, str, str]] = []
    taken: dict[int, set[int]] = {}
    extra: set[str] = set()
    raised: set[str] = set()
    for j in whole:
        _take_along(where, j, by_local[j], taken)
    for path, entries in by_path.items():
        local = int(path.split(".")[2])
        if local in whole:
            continue
        needs = [e.need for e in entries]
        if set(hits(where, local)) - {e.block for e in entries}:
            needs.append(outer)  # a block this glob hits without a logged layer here runs at the outer recipe
        top = max(needs, key=lambda p: _ORDER.get(p, -1))
        cheaper = [e.name for e in entries if _ORDER.get(e.need, -1) < _ORDER.get(top, -1)]
        if top != BF16:
            raised.update(cheaper)
        if top == outer:
            continue  # nothing here needs another precision than the outer recipe (cheaper rungs run at it)
        asked = [e for e in entries if e.need == top]
        _take_along(where, local, asked, taken)
        if top == BF16:
            extra.update(cheaper)
            out_bf16.append((escape(path), _comment(where, local, asked, "kept in BF16")))
        else:
            out_rungs.append((top, escape(path), _comment(where, local, asked, f"{top} (precision ladder)")))
    for name, path in loose:
        need = BF16 if name in bf16 else rungs.get(name, outer)
        if need == BF16:
            out_bf16.append((escape(path), f"{name}: kept in BF16 (outside the transformer blocks)"))
        else:
            out_rungs.append((need, escape(path), f"{name}: {need} (precision ladder)"))
    order = {layer.name: i for i, layer in enumerate(decision.layers)}
    return StageGlobs(
        out_bf16,
        out_rungs,
        tuple(sorted(extra, key=order.__getitem__)),
        tuple(sorted(raised, key=order.__getitem__)),
        {block: tuple(sorted(others)) for block, others in sorted(taken.items()) if others},
    )


def hits(where: Placement, local: int) -> list[int]:
    """Every global block a glob on local block index `local` hits: that index on every stage and chunk."""
    return [
        chunk.start + local
        for pp_rank in range(where.layout.pp)
        for chunk in rank_chunks(where.layout, pp_rank)
        if local < len(chunk)
    ]


def _take_along(where: Placement, local: int, asked: list[_Entry], taken: dict[int, set[int]]) -> None:
    requested = {e.block for e in asked}
    others = set(hits(where, local)) - requested
    for block in requested:
        taken.setdefault(block, set()).update(others)


def _comment(where: Placement, local: int, entries: list[_Entry], what: str) -> str:
    requested = sorted({e.block for e in entries})
    others = [b for b in hits(where, local) if b not in requested]
    text = f"global block(s) {_blocks(requested)} (local block {local} of its stage): {what}"
    if others:
        text += f"; this glob also hits global block(s) {_blocks(others)} (local block {local} of every stage)"
    return text


def _blocks(blocks: list[int]) -> str:
    return ", ".join(map(str, blocks[:16])) + (f", ... ({len(blocks)} in all)" if len(blocks) > 16 else "")


def pointer(where: Placement) -> str:
    """Where to get exactly one global block in low precision, for this job's naming."""
    yaml = (
        "the TE debug YAML per stage (format te-yaml with pp_stage=K: the logs name blocks locally)"
        if where.naming == LOCAL
        else "the TE debug YAML (format te-yaml: its names are global, one file is exact on every stage; TE's "
        "debug API, Megatron-Bridge's tensor_inspect)"
    )
    return f"{yaml}, or a custom recipe factory (TE CustomRecipe reading the pipeline rank, Megatron --custom-recipe)"


def approximation(staged: StageGlobs, where: Placement) -> str | None:
    """The clause of Megatron's `applied()` when a glob takes other blocks along (None when none does)."""
    if staged.exact:
        return None
    pairs = "; ".join(f"block {b} -> also {_blocks(list(o))}" for b, o in list(staged.taken_along.items())[:6])
    raised = f", {len(staged.raised)} at a more precise recipe than the ladder asks" if staged.raised else ""
    return (
        f"pipeline parallel ({where.layout.describe()}): every stage reads the same --te-precision-config-file and "
        f"its globs see the stage's local block index, so they also hit other stages' blocks ({pairs}): "
        f"{len(staged.extra_bf16)} more layer(s) in BF16{raised}. For exactly the requested blocks use "
        f"{pointer(where)}"
    )


def applied(
    result: AppliedPolicy,
    decision: PolicyDecision,
    staged: StageGlobs | None,
    edges: Callable[[PolicyDecision], tuple[int, int] | None],
) -> AppliedPolicy:
    """Megatron's `applied()` with what the globs take along when the script writes a precision config (the
    route megatron.py's `render` takes: ladder rungs, or BF16 layers the first/last flags cannot express), and the
    run's layout caveat (`pipeline.qualify`)."""
    where = placement(decision)
    if staged is None or where is None or not (staged.rungs or (staged.bf16 and edges(decision) is None)):
        return qualify(result, decision)
    layers = tuple(dict.fromkeys((*result.bf16_layers, *staged.extra_bf16)))
    return qualify(replace(result, bf16_layers=layers), decision, approximation(staged, where))


def scope(decision: PolicyDecision) -> str:
    """The precision-config file's line on pipeline parallelism."""
    where = placement(decision)
    if where is None:
        return "assumes no pipeline parallelism."
    return (
        f"pipeline parallel ({where.layout.describe()}): indices are each stage's own (from 0), and a glob hits its "
        "local block on EVERY stage (see each matcher's comment)."
    )


def annotate(section: dict[str, Any], decision: PolicyDecision, staged: StageGlobs | None) -> dict[str, Any]:
    """The JSON `megatron` section with what pipeline parallelism changes (a copy; the same object without it)."""
    where = placement(decision)
    if where is None:
        return section
    out = dict(section)
    notes = list(section.get("notes", []))
    config = "--te-precision-config-file" in section.get("extra_args", [])
    if config and staged is not None and not staged.exact:
        out["precision_config_also_hits"] = sorted({b for others in staged.taken_along.values() for b in others})
        text = approximation(staged, where) or ""
        notes.append(text[0].upper() + text[1:] + ".")
    elif section.get("first_last_layers_bf16"):
        notes.append(
            f"Pipeline parallel ({where.layout.describe()}): --num-layers-at-start-in-bf16 / "
            "--num-layers-at-end-in-bf16 count global blocks (Megatron tests the layer's global number), so the "
            "flags land on the right blocks on every stage."
        )
    out["notes"] = notes
    return out
