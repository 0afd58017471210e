"""One pipeline stage of a model under the policy's global layer names: `stage_policy`.

Belongs here: which global blocks this process holds (explicit `pp_rank=` / `vp_stage=` / `layer_offset=`, else
`megatron.core.parallel_state`, else the blocks' own `layer_number`), the policy with its names rewritten to the
names this model's modules get and the other stages' layers set apart, and the refusal when the stage cannot be
told. Must not be here: resolving names to modules (`names`, `plan`), the backends.

Rules (the policy's `parallel` section, written by the service's policy/render/pipeline.py `policy_json`):
* The policy names blocks globally: `block_base` 1 when its numbers are `layer_number`s (TE's debug API on Megatron),
  0 when 0-based; `stages[pp_rank][chunk]` is [first, stop) of the global 0-based blocks of each model chunk.
* A block module of this model (a child of a ModuleList named like the policy's block container: `layers`, `h`,
  `block(s)`) is global block `layer_number - 1` when it has a `layer_number` (Megatron sets it to the global 1-based
  number: megatron/core/transformer/transformer_layer.py `layer_number + get_transformer_layer_offset(...)`), else
  `offset + index`, the chunk's offset coming from `layer_offset=` or from the stage's chunks. nvdlfw_inspect names
  the module by the same `layer_number` or index (client/apply/names.py), so a policy name becomes this model's
  name by its block number alone.
* Layers of blocks this process does not hold are not unmatched: they are listed in the report's `other_stages`.
  A name outside the blocks (the output layer) that this model lacks is another stage's on every stage but the
  last, and unmatched (an error) on the last.
* No pipeline parallelism in the policy: nothing changes (`pp_rank=0` / `layer_offset=0` accepted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fp8_policy.client.apply.names import ROOT, NameIndex, normalize

if TYPE_CHECKING:
    from torch import nn

BLOCK_CONTAINERS = frozenset({"layers", "layer", "h", "blocks", "block"})  # policy/names.py's (a test keeps them equal)


class StageUnknown(ValueError):
    """The policy is for a pipeline-parallel job and this process's stage cannot be told (nothing was changed)."""


@dataclass(slots=True)
class StagePolicy:
    """The policy for this process: names as this model's modules get them, other stages' layers set apart."""

    policy: dict[str, Any]
    stage: str  # which stage and how it was told
    other_stages: list[str] = field(default_factory=list)  # the policy's names held by other stages
    original: dict[str, str] = field(default_factory=dict)  # this model's name -> the policy's name


@dataclass(frozen=True, slots=True)
class _Block:
    chunk: int
    container: str  # normalized logged path of the ModuleList (`model.decoder.layers`)
    key: str  # the ModuleList index
    layer_number: int | None


def block_at(name: str) -> tuple[int, int] | None:
    """(position of the block number among the dot-separated parts, the number): `a.layers.3.b` -> (2, 3)."""
    parts = name.split(".")
    for pos, part in enumerate(parts[:-1]):
        number = parts[pos + 1]
        if part in BLOCK_CONTAINERS and number.isascii() and number.isdigit():
            return pos + 1, int(number)
    return None


def stage_policy(
    model: nn.Module | Sequence[nn.Module],
    policy: Mapping[str, Any],
    *,
    pp_rank: int | None = None,
    vp_stage: int | None = None,
    layer_offset: int | None = None,
) -> StagePolicy | None:
    """The policy as this process applies it; None when the policy's job had no pipeline parallelism."""
    parallel = policy.get("parallel") if isinstance(policy, Mapping) else None
    pp = parallel.get("pp") if isinstance(parallel, Mapping) else None
    if not isinstance(pp, int) or pp <= 1:
        if (pp_rank or 0) != 0 or (layer_offset or 0) != 0 or (vp_stage or 0) != 0:
            raise StageUnknown("pp_rank / vp_stage / layer_offset given, but the policy's run had no pipeline stages")
        return None
    assert isinstance(parallel, Mapping)
    if parallel.get("caveat"):
        raise StageUnknown(f"the policy's layer names cannot be mapped to pipeline stages: {parallel['caveat']}")
    stages = _stages(parallel.get("stages"), pp)
    base = 1 if parallel.get("block_base") == 1 else 0
    blocks = _model_blocks(model)
    held, how, rank = _held(blocks, stages, pp_rank, vp_stage, layer_offset, len(_chunks(model)))
    index = NameIndex(model)
    out = StagePolicy(dict(policy), how)

    def local(name: str) -> str | None:
        found = block_at(name)
        if found is None:
            if index.resolve(name) is None and rank is not None and rank != pp - 1:
                return None  # outside the blocks, held by another stage (the output layer is the last stage's)
            return name
        position, number = found
        block = number - base
        if block not in held:
            return None
        container = normalize(".".join(name.split(".")[:position]))
        target = held[block].get(container)
        if target is None:
            return name  # no such container here: left to the name resolution (unmatched, with suggestions)
        parts = name.split(".")
        parts[position] = str(target.layer_number if target.layer_number is not None else target.key)
        return ".".join(parts)

    out.policy = _rewrite(policy, local, out)
    return out


def _stages(value: object, pp: int) -> list[list[range]]:
    if not isinstance(value, list) or len(value) != pp:
        raise StageUnknown("the policy's parallel section has no stages (its layout cannot place the blocks)")
    try:
        return [[range(int(c[0]), int(c[1])) for c in chunks] for chunks in value]
    except (TypeError, ValueError, IndexError) as exc:
        raise StageUnknown(f"the policy's parallel.stages is malformed: {exc}") from exc


def _chunks(model: nn.Module | Sequence[nn.Module]) -> list[nn.Module]:
    from torch import nn

    return [model] if isinstance(model, nn.Module) else list(model)


def _model_blocks(model: nn.Module | Sequence[nn.Module]) -> list[_Block]:
    """Every child of a block-container ModuleList, with the chunk it is in (nvdlfw_inspect's naming walk)."""
    from torch import nn

    found: list[_Block] = []

    def visit(module: nn.Module, name: str, chunk: int) -> None:
        for key, child in module.named_children():
            path = f"{name}.{key}"
            if isinstance(child, nn.ModuleList) and key in BLOCK_CONTAINERS:
                for index, block in child.named_children():
                    number = getattr(block, "layer_number", None)
                    number = number if isinstance(number, int) and not isinstance(number, bool) else None
                    found.append(_Block(chunk, normalize(path), index, number))
                    visit(block, f"{path}.{number if number is not None else index}", chunk)
            elif isinstance(child, nn.ModuleList):
                for index, item in child.named_children():
                    visit(item, f"{path}.{getattr(item, 'layer_number', index)}", chunk)
            else:
                visit(child, path, chunk)

    for chunk, module in enumerate(_chunks(model)):
        visit(module, ROOT, chunk)
    return found


def _held(
    blocks: list[_Block],
    stages: list[list[range]],
    pp_rank: int | None,
    vp_stage: int | None,
    layer_offset: int | None,
    n_chunks: int,
) -> tuple[dict[int, dict[str, _Block]], str, int | None]:
    """global 0-based block -> container -> this model's block, how the stage was told, and the pipeline rank."""
    numbered = bool(blocks) and all(b.layer_number is not None for b in blocks)
    offsets, how, pp_rank = _offsets(stages, pp_rank, vp_stage, layer_offset, n_chunks, numbered)
    if offsets is None and not numbered:
        raise StageUnknown(
            f"the policy is for a pipeline-parallel job (PP{len(stages)}) and this model's blocks carry no "
            "layer_number, so their indices (from 0 on every stage) do not say which global blocks they are: pass "
            "pp_rank= (and vp_stage= for one virtual-pipeline chunk) or layer_offset=, or initialise "
            "megatron.core.parallel_state"
        )
    held: dict[int, dict[str, _Block]] = {}
    for block in blocks:
        if block.layer_number is not None:
            number = block.layer_number - 1
        else:
            assert offsets is not None
            number = offsets[block.chunk] + int(block.key)
        held.setdefault(number, {})[block.container] = block
    if pp_rank is not None:
        mine = {b for chunk in stages[pp_rank] for b in chunk}
        stray = sorted(set(held) - mine)
        if stray:
            raise StageUnknown(
                f"this model's blocks {stray[:8]} (by their layer_number) are not pipeline rank {pp_rank}'s "
                f"(global blocks {_spans(stages[pp_rank])}): wrong pp_rank, or a model built for another layout"
            )
        return {b: held.get(b, {}) for b in sorted(mine)}, how, pp_rank
    return held, how or "the blocks' own layer_number (global)", _rank_of(held, stages)


def _offsets(
    stages: list[list[range]],
    pp_rank: int | None,
    vp_stage: int | None,
    layer_offset: int | None,
    n_chunks: int,
    numbered: bool,
) -> tuple[list[int] | None, str, int | None]:
    """Each given chunk's first global block, how it was told, and the pipeline rank (None when not told). Blocks
    that carry their own layer_number need no offset."""
    if layer_offset is not None:
        if n_chunks != 1:
            raise StageUnknown("layer_offset= names the offset of one model chunk; pass the chunks one at a time")
        return [int(layer_offset)], f"layer_offset={layer_offset}", None
    how = f"pp_rank={pp_rank}" if pp_rank is not None else ""
    if pp_rank is None:
        from fp8_policy.client.parallel_record import megatron_state

        state = megatron_state()
        if state is None:
            return None, "", None
        pp_rank, how = int(state["pp_rank"]), "megatron.core.parallel_state"
        vp_stage = vp_stage if vp_stage is not None else state.get("vp_rank")
    if not 0 <= pp_rank < len(stages):
        raise StageUnknown(f"pp_rank {pp_rank} is not a pipeline rank of the policy's job (0 to {len(stages) - 1})")
    chunks = stages[pp_rank]
    if n_chunks == len(chunks):
        return [c.start for c in chunks], how, pp_rank
    if n_chunks == 1 and vp_stage is not None and 0 <= vp_stage < len(chunks):
        return [chunks[vp_stage].start], f"{how}, vp_stage={vp_stage}", pp_rank
    if numbered:
        return None, f"{how}, blocks by their own layer_number", pp_rank
    raise StageUnknown(
        f"pipeline rank {pp_rank} holds {len(chunks)} model chunk(s) ({_spans(chunks)}) and {n_chunks} were given: "
        "pass the list of chunks, or one chunk with vp_stage="
    )


def _rank_of(held: Mapping[int, object], stages: list[list[range]]) -> int | None:
    mine = set(held)
    return next((p for p, chunks in enumerate(stages) if mine and mine <= {b for c in chunks for b in c}), None)


def _spans(chunks: Sequence[range]) -> str:
    return ", ".join(f"{c.start}-{c.stop - 1}" for c in chunks)


def _rewrite(policy: Mapping[str, Any], local: Any, out: StagePolicy) -> dict[str, Any]:
    """The policy with every layer name rewritten by `local` (None: another stage's)."""

    def name(item: str) -> str | None:
        mapped = local(item)
        if mapped is None:
            if item not in out.other_stages:
                out.other_stages.append(item)
            return None
        out.original.setdefault(mapped, item)
        return str(mapped)

    result = dict(policy)
    for key in ("fp8_skip_layers", "kept_bf16"):
        if isinstance(policy.get(key), list):
            result[key] = [m for n in policy[key] if isinstance(n, str) and (m := name(n)) is not None]
    if isinstance(policy.get("gemm_overrides"), list):
        result["gemm_overrides"] = [
            {**o, "layer": m}
            for o in policy["gemm_overrides"]
            if isinstance(o, Mapping) and isinstance(o.get("layer"), str) and (m := name(o["layer"])) is not None
        ]
    ladder = policy.get("precision_ladder")
    if isinstance(ladder, Mapping) and isinstance(ladder.get("layers"), Mapping):
        layers = {m: rung for n, rung in ladder["layers"].items() if isinstance(n, str) and (m := name(n)) is not None}
        result["precision_ladder"] = {**ladder, "layers": layers}
    return result
