"""A training job's parallel layout (TP, PP, VPP, DP, EP, CP) as Megatron-LM states it, read from run metadata.

Belongs here: `ParallelLayout` (the sizes, rank order and pipeline split of one job) and `layout_from_metadata`,
which reads them from an upload's metadata under Megatron's own argument names (flat, or under a `"parallel"`
object), with the bounds every size must keep. Must not be here: rank coordinates (ranks.py), which blocks a
stage holds (stages.py), names (naming.py), anything that reads logs.

Names accepted (megatron/training/arguments.py and TransformerConfig, megatron/core/transformer/transformer_config.py):
`tensor_model_parallel_size`, `pipeline_model_parallel_size`, `virtual_pipeline_model_parallel_size`,
`num_layers_per_virtual_pipeline_stage`, `num_virtual_stages_per_pipeline_rank`, `expert_model_parallel_size`,
`expert_tensor_parallel_size`, `context_parallel_size`, `num_layers`, `num_moe_experts`,
`decoder_first_pipeline_num_layers` / `num_layers_in_first_pipeline_stage`, `decoder_last_pipeline_num_layers` /
`num_layers_in_last_pipeline_stage`, `pipeline_model_parallel_layout`, `account_for_embedding_in_pipeline_split`,
`account_for_loss_in_pipeline_split`, `world_size`, and the rank order: `order` (as passed to
`parallel_state.initialize_model_parallel`, default "tp-cp-ep-dp-pp") or `use_tp_pp_dp_mapping` (Megatron's flag
for "tp-cp-ep-pp-dp", megatron/training/initialize.py).

Metadata is advisory: a value that is not a positive integer within its bound (policy/model_bounds.py) is left out
with a note, never an error (the upload's metadata is stored as sent; the API validates overrides elsewhere).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fp8_policy.policy.model_bounds import MAX_NUM_EXPERTS, MAX_NUM_LAYERS, MAX_PARALLEL_SIZE, MAX_WORLD_SIZE
from fp8_policy.policy.parallel.pipeline_layout import LayoutError, stage_decoder_counts

DEFAULT_ORDER = "tp-cp-ep-dp-pp"  # megatron/core/parallel_state.py, initialize_model_parallel(order=...)
ORDER_TOKENS = ("tp", "cp", "ep", "dp", "pp")

# our field -> the metadata keys that give it, first found wins (Megatron CLI names, then TransformerConfig's)
_KEYS: dict[str, tuple[str, ...]] = {
    "tp": ("tensor_model_parallel_size", "tp", "tp_size"),
    "pp": ("pipeline_model_parallel_size", "pp", "pp_size"),
    "vpp": ("virtual_pipeline_model_parallel_size", "num_virtual_stages_per_pipeline_rank", "vpp", "vpp_size"),
    "layers_per_virtual_stage": ("num_layers_per_virtual_pipeline_stage",),
    "ep": ("expert_model_parallel_size", "ep", "ep_size"),
    "etp": ("expert_tensor_parallel_size", "etp"),
    "cp": ("context_parallel_size", "cp", "cp_size"),
    "dp": ("data_parallel_size", "dp", "dp_size"),
    "world_size": ("world_size",),
    "num_layers": ("num_layers", "num_hidden_layers", "n_layer"),
    "num_moe_experts": ("num_moe_experts", "num_experts", "n_routed_experts"),
    "first_stage_layers": ("decoder_first_pipeline_num_layers", "num_layers_in_first_pipeline_stage"),
    "last_stage_layers": ("decoder_last_pipeline_num_layers", "num_layers_in_last_pipeline_stage"),
}
_BOUNDS = {
    "world_size": MAX_WORLD_SIZE,
    "num_layers": MAX_NUM_LAYERS,
    "num_moe_experts": MAX_NUM_EXPERTS,
    "first_stage_layers": MAX_NUM_LAYERS,
    "last_stage_layers": MAX_NUM_LAYERS,
    "layers_per_virtual_stage": MAX_NUM_LAYERS,
}
_FLAGS = {
    "embedding_in_split": "account_for_embedding_in_pipeline_split",
    "loss_in_split": "account_for_loss_in_pipeline_split",
}
# Keys that say a job is parallel at all: with none of them, the metadata states no layout.
LAYOUT_KEYS: frozenset[str] = frozenset(
    k for field_name, keys in _KEYS.items() if field_name not in ("num_layers", "num_moe_experts") for k in keys
) | frozenset({"pipeline_model_parallel_layout", "order", "use_tp_pp_dp_mapping"})


@dataclass(frozen=True, slots=True)
class ParallelLayout:
    """The sizes and rank order of one job; `world_size = tp * cp * dp * pp` (EP and expert TP split the same
    ranks another way: `world_size = etp * ep * edp * pp`, Megatron's expert rank generator)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int | None = None  # expert tensor parallel size; None: the same as tp (Megatron's default)
    vpp: int | None = None  # virtual pipeline stages per rank; None: not interleaved
    order: str = DEFAULT_ORDER
    num_layers: int | None = None  # transformer blocks in the whole model
    num_moe_experts: int | None = None
    first_stage_layers: int | None = None  # uneven pipeline: blocks on the first / last stage
    last_stage_layers: int | None = None
    stage_counts: tuple[tuple[int, ...], ...] | None = None  # explicit layout: decoder blocks [pp_rank][vp_stage]
    embedding_in_split: bool = False
    loss_in_split: bool = False

    @property
    def world_size(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    @property
    def expert_tp(self) -> int:
        return self.etp if self.etp is not None else self.tp

    @property
    def expert_dp(self) -> int:
        """Expert data-parallel size (`expert_data_parallel_size` in parallel_state.initialize_model_parallel)."""
        return self.world_size // (self.expert_tp * self.ep * self.pp)

    @property
    def local_experts(self) -> int | None:
        """Experts each EP rank holds (`num_moe_experts / expert_model_parallel_size`), when known."""
        if self.num_moe_experts is None or self.num_moe_experts % self.ep:
            return None
        return self.num_moe_experts // self.ep

    @property
    def virtual_stages(self) -> int:
        return self.vpp or 1

    def describe(self) -> str:
        """`TP2 x PP4 x DP2` (sizes above 1, and VPP/EP/CP when used)."""
        parts = [f"TP{self.tp}", f"PP{self.pp}"]
        if self.vpp:
            parts.append(f"VPP{self.vpp}")
        if self.cp > 1:
            parts.append(f"CP{self.cp}")
        if self.ep > 1:
            parts.append(f"EP{self.ep}")
        parts.append(f"DP{self.dp}")
        return " x ".join(parts)


@dataclass(slots=True)
class LayoutReading:
    """What the metadata says: the layout (None when it states none), and notes on what was left out or derived."""

    layout: ParallelLayout | None
    notes: list[str] = field(default_factory=list)


def layout_from_metadata(metadata: Mapping[str, Any], *, ranks_seen: int | None = None) -> LayoutReading:
    """The layout stated by `metadata` (flat Megatron names, or under `"parallel"`; the nested object wins).

    `ranks_seen` is the number of ranks the logs hold: it fills in a missing `world_size`. A stated world size
    that does not match the sizes is named in a note and the sizes decide the data-parallel size.
    """
    source = dict(metadata)
    nested = metadata.get("parallel")
    if isinstance(nested, Mapping):
        source.update(nested)
    if not LAYOUT_KEYS & set(source):
        return LayoutReading(None)
    notes: list[str] = []
    values = {
        name: _int_value(source, keys, _BOUNDS.get(name, MAX_PARALLEL_SIZE), notes) for name, keys in _KEYS.items()
    }
    order = _order(source, notes)
    flags = {name: source.get(key) is True for name, key in _FLAGS.items()}
    tp, pp, cp = values["tp"] or 1, values["pp"] or 1, values["cp"] or 1
    world = values["world_size"] or _world_from(values, tp, pp, cp) or ranks_seen
    dp = _data_parallel(world, values["dp"], tp, pp, cp, notes)
    vpp, counts = _virtual(source, values, pp, notes)
    layout = ParallelLayout(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        ep=values["ep"] or 1,
        etp=values["etp"],
        vpp=vpp,
        order=order,
        num_layers=values["num_layers"],
        num_moe_experts=values["num_moe_experts"],
        first_stage_layers=values["first_stage_layers"] if pp > 1 else None,
        last_stage_layers=values["last_stage_layers"] if pp > 1 else None,
        stage_counts=counts,
        **flags,
    )
    _check_experts(layout, notes)
    return LayoutReading(layout, notes)


def _int_value(source: Mapping[str, Any], keys: tuple[str, ...], bound: int, notes: list[str]) -> int | None:
    for key in keys:
        value = source.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= bound:
            notes.append(f"metadata {key}={str(value)[:40]!r} left out: expected an integer from 1 to {bound}")
            return None
        return value
    return None


def _order(source: Mapping[str, Any], notes: list[str]) -> str:
    given = source.get("order")
    if given is None:
        return "tp-cp-ep-pp-dp" if source.get("use_tp_pp_dp_mapping") is True else DEFAULT_ORDER
    tokens = str(given).strip().lower().split("-") if isinstance(given, str) and len(given) <= 40 else []
    if not tokens or len(set(tokens)) != len(tokens) or not set(tokens) <= set(ORDER_TOKENS):
        notes.append(f"metadata order={str(given)[:40]!r} left out: expected tokens of {'-'.join(ORDER_TOKENS)}")
        return DEFAULT_ORDER
    # RankGenerator appends the tokens an order leaves out (each of size 1 there)
    return "-".join(tokens + [t for t in ORDER_TOKENS if t not in tokens])


def _world_from(values: dict[str, int | None], tp: int, pp: int, cp: int) -> int | None:
    return tp * pp * cp * values["dp"] if values["dp"] else None


def _data_parallel(world: int | None, dp: int | None, tp: int, pp: int, cp: int, notes: list[str]) -> int:
    model = tp * pp * cp
    if world is None:
        return dp or 1
    if world % model:
        notes.append(
            f"world size {world} is not a multiple of TP x PP x CP = {model}: the stated sizes cannot all be right"
        )
        return dp or max(1, world // model)
    if dp is not None and dp * model != world:
        notes.append(f"data_parallel_size {dp} does not match world size {world} / (TP x PP x CP = {model})")
    return world // model


def _virtual(
    source: Mapping[str, Any], values: dict[str, int | None], pp: int, notes: list[str]
) -> tuple[int | None, tuple[tuple[int, ...], ...] | None]:
    """VPP size and, for an explicit layout, the decoder blocks per stage (arguments.py's precedence)."""
    text = source.get("pipeline_model_parallel_layout")
    if text is not None:
        try:
            counts = stage_decoder_counts(text if isinstance(text, (str, list)) else str(text), pp)
        except LayoutError as exc:
            notes.append(f"metadata pipeline_model_parallel_layout left out: {exc}")
        else:
            virtual = len(counts[0])
            return (virtual if virtual > 1 else None), counts
    if pp == 1:
        return None, None
    vpp = values["vpp"]
    per_virtual = values["layers_per_virtual_stage"]
    if vpp is None and per_virtual is not None and values["num_layers"]:
        blocks = values["num_layers"] + sum(source.get(k) is True for k in _FLAGS.values())
        if blocks % pp or (blocks // pp) % per_virtual:
            notes.append(
                f"num_layers_per_virtual_pipeline_stage {per_virtual} does not divide the {blocks // pp} blocks "
                "of a pipeline stage"
            )
        else:
            vpp = blocks // pp // per_virtual
    return (vpp if vpp and vpp > 1 else None), None


def _check_experts(layout: ParallelLayout, notes: list[str]) -> None:
    if layout.num_moe_experts is not None and layout.num_moe_experts % layout.ep:
        notes.append(
            f"num_moe_experts {layout.num_moe_experts} is not a multiple of expert_model_parallel_size {layout.ep}"
        )
    if layout.world_size % (layout.expert_tp * layout.ep * layout.pp):
        notes.append(
            f"world size {layout.world_size} is not a multiple of expert TP x EP x PP = "
            f"{layout.expert_tp * layout.ep * layout.pp}"
        )
