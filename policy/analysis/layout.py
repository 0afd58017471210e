"""The model as analysis sees it: each layer's status and underflow levels, body blocks, regions and BF16 neighbours.

Rules:
* Status. `bf16`: plan lines say high precision, or — only when the run has no plan lines at all — a GEMM layer
  without FP8 stats. `fp8`: FP8 stats were logged (and the plan does not say high precision). `fp8_unobserved`:
  the plan says FP8 but no stats were logged (cannot be assessed, stays FP8). `ignored`: everything else
  (containers, attention cores, embeddings without a plan).
* A layer's tensor level is the worst rank's level of its un-prefixed `underflows%` (row- or columnwise), leaving
  out ranks that `outliers.py` found to be high outliers for that tensor (they are reported as `rank_outlier`).
  A tensor is failing at or above `critical`; the layer's severity is its worst tensor band. A mixed-format run's
  layer of the other format (an FP8 layer of an NVFP4 run) is judged with its own format's bands (`own_bands`).
* Body blocks are the logged block indices (plus `metadata["num_layers"]` blocks when given, within its bound:
  policy/model_bounds.py; past it the metadata is ignored and `metadata_notes` says so). A block is BF16 when
  its GEMM layers are all BF16; blocks absent from a run without plan lines are presumed BF16 (logging skips them).
* Regions: the first / last `ceil(n * edge_fraction)` blocks are early / late, the rest middle.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from fp8_policy.policy.analysis.signals import SeriesSummary, Signals
from fp8_policy.policy.model_bounds import metadata_dimension
from fp8_policy.policy.records import QUANTIZED_TENSORS, LayerGroup, LayerInfo, Precision, RunData
from fp8_policy.policy.thresholds import Severity, Thresholds, worst
from fp8_policy.policy.vocabulary import LayerStatus as LayerStatus  # re-exported: defined there for the API's schemas

GEMM_SUBLAYERS: frozenset[str] = frozenset({"qkv", "q", "k", "v", "kv", "proj", "fc1", "fc2", "layernorm_mlp"})


def is_gemm_layer(info: LayerInfo) -> bool:
    """A head, or a sublayer name that is a GEMM (`cross_q`, `encoder.fc1`, `fc1.gemm_3` included)."""
    if info.structure.group is LayerGroup.HEAD:
        return True
    if info.structure.group is LayerGroup.EMBEDDING or not info.structure.sublayer:
        return False
    base = info.structure.sublayer.split(".gemm_")[0].rsplit(".", 1)[-1].removeprefix("cross_")
    return base in GEMM_SUBLAYERS


def layer_status(info: LayerInfo, run_has_plans: bool) -> LayerStatus:
    if info.precision is Precision.HIGH:
        return LayerStatus.BF16
    if info.has_fp8_stats:
        return LayerStatus.FP8
    if info.precision in (Precision.FP8, Precision.MIXED):
        return LayerStatus.UNOBSERVED
    if not run_has_plans and is_gemm_layer(info):
        return LayerStatus.BF16
    return LayerStatus.IGNORED


@dataclass(slots=True)
class LayerLevels:
    """One layer with its status and the worst-rank underflow summary of each quantized tensor."""

    info: LayerInfo
    status: LayerStatus
    tensors: dict[str, SeriesSummary]
    severity: Severity
    failing: tuple[str, ...]
    # the bands this layer is judged with when not the run's (a mixed-format run's layer of the other format)
    own_bands: Thresholds | None = None

    def bands(self, run_bands: Thresholds) -> Thresholds:
        """The thresholds this layer's underflow levels are judged with."""
        return self.own_bands if self.own_bands is not None else run_bands

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def block(self) -> int | None:
        return self.info.structure.index if self.info.structure.group is LayerGroup.BODY else None

    def worst_tensor(self) -> tuple[str, SeriesSummary] | None:
        if not self.tensors:
            return None
        return max(self.tensors.items(), key=lambda item: item[1].level)


@dataclass(slots=True)
class Layout:
    levels: dict[str, LayerLevels]  # run order
    blocks: list[int]  # body block indices, ascending
    block_status: dict[int, str]  # fp8 | bf16 | unknown
    index_base: int
    edge: int  # number of blocks in each of the early and late regions
    positions: dict[int, int] = field(init=False)  # block index -> its position in `blocks`

    def __post_init__(self) -> None:
        self.positions = {block: position for position, block in enumerate(self.blocks)}

    def fp8(self) -> list[LayerLevels]:
        return [lv for lv in self.levels.values() if lv.status is LayerStatus.FP8]

    def region(self, block: int) -> str:
        position = self.positions[block]
        if position < self.edge:
            return "early"
        if position >= len(self.blocks) - self.edge:
            return "late"
        return "middle"

    def bf16_neighbours(self, level: LayerLevels) -> list[str]:
        """Descriptions of BF16 blocks/heads next to this layer's block (empty when none)."""
        block = level.block
        if block is None or block not in self.positions:
            return []
        position = self.positions[block]
        found = [
            f"block {self.blocks[p]}"
            for p in (position - 1, position + 1)
            if 0 <= p < len(self.blocks) and self.block_status[self.blocks[p]] == "bf16"
        ]
        if position == len(self.blocks) - 1:
            found += [
                lv.name
                for lv in self.levels.values()
                if lv.status is LayerStatus.BF16 and lv.info.structure.group is LayerGroup.HEAD
            ]
        return found


def layer_statuses(run: RunData) -> dict[str, LayerStatus]:
    has_plans = any(info.precision is not Precision.UNKNOWN for info in run.layers.values())
    return {name: layer_status(info, has_plans) for name, info in run.layers.items()}


def build_layout(
    run: RunData,
    signals: Signals,
    thresholds: Thresholds,
    statuses: dict[str, LayerStatus],
    excluded: frozenset[tuple[str, str, int]] = frozenset(),
    layer_bands: Mapping[str, Thresholds] | None = None,
) -> Layout:
    """Levels, blocks and regions; `excluded` holds (layer, tensor, rank) series left out of the levels;
    `layer_bands` the layers judged with other bands than `thresholds` (a mixed-format run)."""
    skip: dict[tuple[str, str], set[int]] = {}
    for layer, tensor, rank in excluded:
        skip.setdefault((layer, tensor), set()).add(rank)
    own = layer_bands or {}
    levels = {
        name: _levels(info, statuses[name], signals, own.get(name, thresholds), skip, name in own)
        for name, info in run.layers.items()
    }
    has_plans = any(info.precision is not Precision.UNKNOWN for info in run.layers.values())
    blocks, status, base = _blocks(levels, metadata_dimension(run.metadata, "num_layers")[0], has_plans)
    edge = max(1, math.ceil(len(blocks) * thresholds.edge_fraction)) if blocks else 0
    return Layout(levels, blocks, status, base, edge)


def metadata_notes(run: RunData) -> list[str]:
    """What the layout left out of the run's metadata, and why (a `num_layers` past its bound, not an integer)."""
    note = metadata_dimension(run.metadata, "num_layers")[1]
    return [note] if note else []


def _levels(
    info: LayerInfo,
    status: LayerStatus,
    signals: Signals,
    thresholds: Thresholds,
    skip: dict[tuple[str, str], set[int]],
    own_bands: bool = False,
) -> LayerLevels:
    tensors: dict[str, SeriesSummary] = {}
    if status is LayerStatus.FP8:
        for tensor in QUANTIZED_TENSORS:
            ranks = frozenset(skip.get((info.name, tensor), ()))
            summary = signals.worst(info.name, tensor, skip_ranks=ranks)
            if summary is not None:
                tensors[tensor] = summary
    severity = worst(thresholds.band(s.level) for s in tensors.values())
    failing = tuple(t for t, s in tensors.items() if s.level >= thresholds.critical)
    return LayerLevels(info, status, tensors, severity, failing, thresholds if own_bands else None)


def _blocks(
    levels: dict[str, LayerLevels],
    num_layers: int | None,
    has_plans: bool,
) -> tuple[list[int], dict[int, str], int]:
    members: dict[int, list[LayerStatus]] = {}
    for lv in levels.values():
        if lv.block is not None and lv.status is not LayerStatus.IGNORED:
            members.setdefault(lv.block, []).append(lv.status)
    base = 0 if 0 in members or not members else 1
    indices = set(members)
    if num_layers is not None:  # within MAX_NUM_LAYERS (metadata_dimension)
        indices |= set(range(base, base + num_layers))
    status: dict[int, str] = {}
    for block in indices:
        kinds = members.get(block)
        if kinds is None:
            status[block] = "unknown" if has_plans else "bf16"
        elif any(k in (LayerStatus.FP8, LayerStatus.UNOBSERVED) for k in kinds):
            status[block] = "fp8"
        else:
            status[block] = "bf16"
    return sorted(indices), status, base
