"""How a job's logs number its blocks and experts, and the rewrite of one rank's names to global ones.

Belongs here: the naming conventions, `detect_naming` (which one a run's logs follow, judged per pipeline stage
against the layout), and `RankNamer` (one rank's logged layer names -> global names, cached per distinct name).
Must not be here: which blocks a stage holds (stages.py), reading logs or metadata.

Conventions, from the frameworks' sources:
* `layer_number`: nvdlfw_inspect's `infer_and_assign_layer_names` (nvdlfw_inspect/api.py) names each child of a
  ModuleList by its `layer_number` attribute when it has one, and Megatron-Core's TransformerLayer sets it to the
  GLOBAL 1-based number (`layer_number + get_transformer_layer_offset(...)`, transformer_layer.py). So Megatron
  runs through TE's debug API log `decoder.layers.1` .. `decoder.layers.N` across all stages: already global.
* `global`: 0-based global numbers (a model whose blocks keep their global keys on every stage, as torchtitan's
  `ModuleDict` of layers does when pipeline splitting deletes the other stages' keys).
* `local`: the ModuleList index (children without `layer_number`; the default names of `named_modules()`, which
  Megatron's own `--te-precision-config-file` matchers see): every stage starts at 0. Rewritten here to
  `offset + index`, 0-based, so the run keeps its own spelling with the global number.
Experts are always logged locally: TE's GroupedLinear logs `<module>.gemm_<i>` for its local experts, Megatron's
SequentialMLP holds `local_experts.<i>` (no `layer_number`), and the global expert is
`ep_rank * num_local_experts + i` (megatron/core/transformer/moe/experts.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from fp8_policy.policy.names import block_index_at, with_block_index
from fp8_policy.policy.parallel.layout import ParallelLayout
from fp8_policy.policy.parallel.ranks import RankCoord
from fp8_policy.policy.parallel.stages import StageError, rank_chunks

LAYER_NUMBER, GLOBAL, LOCAL = "layer_number", "global", "local"
NAMINGS = (LAYER_NUMBER, GLOBAL, LOCAL)
_GEMM = re.compile(r"^gemm_(\d+)$")
_LOCAL_EXPERTS = "local_experts"


@dataclass(slots=True)
class NamingReading:
    """The convention the logs follow (None: cannot tell) and why."""

    naming: str | None
    notes: list[str] = field(default_factory=list)


def expected_blocks(layout: ParallelLayout, pp_rank: int, naming: str) -> set[int]:
    """The block numbers stage `pp_rank` logs under `naming` (every chunk of the rank)."""
    chunks = rank_chunks(layout, pp_rank)
    if naming == LOCAL:
        return {i for chunk in chunks for i in range(len(chunk))}
    shift = 1 if naming == LAYER_NUMBER else 0
    return {block + shift for chunk in chunks for block in chunk}


def detect_naming(layout: ParallelLayout, logged: Mapping[int, set[int]]) -> NamingReading:
    """Which convention explains the block numbers `logged[pp_rank]` (the union over that stage's ranks).

    A convention fits when every stage logs only blocks it holds under it (stages may log fewer: layers without
    statistics). Without pipeline parallelism all three coincide up to the first number. When several fit, the
    ones that rename nothing are preferred (the stages that logged agree under all of them).
    """
    if layout.pp == 1:
        return NamingReading(GLOBAL)
    try:
        fits = [n for n in NAMINGS if all(logged.get(p, set()) <= expected_blocks(layout, p, n) for p in logged)]
    except StageError as exc:
        return NamingReading(None, [f"the layout cannot place the blocks: {exc}"])
    if not fits:
        seen = ", ".join(f"stage {p}: {_span(sorted(b))}" for p, b in sorted(logged.items()) if b)
        return NamingReading(
            None,
            [
                f"the logged block numbers ({seen}) fit neither local (from 0 on every stage) nor global numbering "
                f"under {layout.describe()} with {layout.num_layers} layers: the stated layout contradicts the logs, "
                "so layers keep their logged names"
            ],
        )
    naming = next(n for n in (LAYER_NUMBER, GLOBAL, LOCAL) if n in fits)
    notes = []
    if naming == LOCAL and layout.virtual_stages > 1:
        notes.append(
            f"blocks are numbered per model chunk (local names) under {layout.virtual_stages} virtual pipeline "
            "stages: the chunks of one rank log the same names and their statistics cannot be told apart"
        )
    return NamingReading(naming, notes)


def experts_are_local(layout: ParallelLayout, logged: Mapping[int, set[int]]) -> bool | None:
    """Whether the expert numbers `logged[ep_rank]` are local (every EP rank from 0), None when they fit neither
    local nor global numbering. Without expert parallelism local and global coincide (True)."""
    if layout.ep == 1:
        return True
    local = layout.local_experts
    seen = [b for b in logged.values() if b]
    if local is None:
        # no num_moe_experts: local when every EP rank logs the same numbers, global when they are disjoint
        if all(b == seen[0] for b in seen):
            return True
        return False if sum(len(b) for b in seen) == len(set().union(*seen)) else None
    if all(max(b) < local for b in seen):
        return True
    if all(b <= set(range(ep * local, (ep + 1) * local)) for ep, b in logged.items()):
        return False
    return None


def _span(values: list[int]) -> str:
    if not values:
        return "none"
    return f"{values[0]}-{values[-1]}" if len(values) > 1 else str(values[0])


class RankNamer:
    """One rank's logged layer names -> global names (`__call__`), each distinct name decomposed once."""

    def __init__(self, layout: ParallelLayout, coord: RankCoord, naming: str | None, local_experts: int | None) -> None:
        """`local_experts`: experts per EP rank when the logs number them locally, None when they are global
        (or unknown) and stay as logged."""
        self._cache: dict[str, str] = {}
        self._expert_base = coord.ep * local_experts if local_experts and layout.ep > 1 else 0
        self._offset: int | None = None
        if naming == LOCAL and layout.pp > 1 and layout.virtual_stages == 1:
            try:
                self._offset = rank_chunks(layout, coord.pp)[0].start
            except StageError:
                self._offset = None

    @property
    def key(self) -> tuple[int, int]:
        """Two namers with the same key rename every name the same way (block offset, first expert)."""
        return (self._offset or 0, self._expert_base)

    def __call__(self, name: str) -> str:
        found = self._cache.get(name)
        if found is None:
            found = self._cache[name] = self._global(name)
        return found

    def _global(self, name: str) -> str:
        if self._offset:
            block = block_index_at(name)
            if block is not None:
                name = with_block_index(name, block[1] + self._offset)
        if self._expert_base:
            name = _shift_expert(name, self._expert_base)
        return name


def _shift_expert(name: str, base: int) -> str:
    parts = name.split(".")
    gemm = _GEMM.match(parts[-1])
    if gemm is not None:
        parts[-1] = f"gemm_{int(gemm.group(1)) + base}"
        return ".".join(parts)
    for pos, part in enumerate(parts[:-1]):
        if part == _LOCAL_EXPERTS and parts[pos + 1].isascii() and parts[pos + 1].isdigit():
            parts[pos + 1] = str(int(parts[pos + 1]) + base)
            return ".".join(parts)
    return name


def expert_index(name: str) -> int | None:
    """The expert number a layer name carries (`...linear_fc1.gemm_5` or `...local_experts.5...`), else None."""
    parts = name.split(".")
    gemm = _GEMM.match(parts[-1])
    if gemm is not None:
        return int(gemm.group(1))
    for pos, part in enumerate(parts[:-1]):
        if part == _LOCAL_EXPERTS and parts[pos + 1].isascii() and parts[pos + 1].isdigit():
            return int(parts[pos + 1])
    return None
