"""From metadata and what each rank logged to a run's `ParallelInfo` and one namer per rank.

Belongs here: `RankEvidence` (a rank's logged layer names and the coordinates it recorded itself) and `resolve`,
the one decision the ingest takes before storing anything: where the layout comes from (the ranks' own records,
then the upload's metadata, then what the logs prove), each rank's coordinates, the naming convention, the
replica groups to compare, and what contradicts what (named in notes; the logs win). Pure: no parsing, no storage.
Must not be here: the arithmetic of ranks and stages (ranks.py, stages.py), digests (replicas.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from fp8_policy.policy.names import block_index_at
from fp8_policy.policy.parallel.infer import infer_layout
from fp8_policy.policy.parallel.info import METADATA, UNKNOWN, ParallelInfo
from fp8_policy.policy.parallel.layout import ParallelLayout, layout_from_metadata
from fp8_policy.policy.parallel.naming import RankNamer, detect_naming, expert_index, experts_are_local
from fp8_policy.policy.parallel.ranks import RankCoord, rank_coord
from fp8_policy.policy.parallel.stages import StageError, check_stages


@dataclass(slots=True)
class RankEvidence:
    """What one rank's logs hold: the layer names of its statistics (as logged) and, when the rank recorded its
    place itself (`fp8_policy.record_parallel_layout`, the collector), its coordinates and sizes."""

    layers: frozenset[str]
    recorded: Mapping[str, Any] | None = None
    digest: bytes | None = None  # whole-rank digest of its series under logged names (replicas.rank_digest)


@dataclass(slots=True)
class Resolution:
    info: ParallelInfo
    coords: dict[int, RankCoord] = field(default_factory=dict)
    experts_local: int | None = None  # experts per EP rank when logged locally

    def namer(self, rank: int) -> Callable[[str], str]:
        """The rank's logged names -> global names (identity when nothing is known to rename)."""
        coord = self.coords.get(rank)
        layout = self.info.layout
        if coord is None or layout is None or self.info.source == UNKNOWN:
            return _same
        return RankNamer(layout, coord, self.info.naming, self.experts_local)

    @classmethod
    def from_info(cls, info: ParallelInfo, experts_local: int | None) -> Resolution:
        """A resolution rebuilt from its stored `info` (and `experts_local`), for jobs that rename ranks after the
        one that resolved: the same namers and replica groups. Only a stated layout places ranks (an inferred one
        names no coordinates but the stage); the expert grid's tensor and data coordinates, which `info` does not
        keep, are the rank order's."""
        layout = info.layout
        if info.source != METADATA or layout is None:
            return cls(info, {}, experts_local)
        coords = {}
        for rank, c in info.coords.items():
            grid = rank_coord(layout, rank) if 0 <= rank < layout.world_size else None
            etp, edp = (grid.etp, grid.edp) if grid is not None else (0, 0)
            coords[rank] = RankCoord(
                rank, c.get("tp", 0), c.get("cp", 0), c.get("dp", 0), c.get("pp", 0), c.get("ep", 0), etp, edp
            )
        return cls(info, coords, experts_local)

    def dense_groups(self) -> list[tuple[int, ...]]:
        """Data-parallel groups: ranks with the same tensor, context and pipeline coordinates."""
        return _groups(self.coords, lambda c: (c.tp, c.cp, c.pp))

    def expert_groups(self) -> list[tuple[int, ...]]:
        """Expert data-parallel groups: ranks with the same expert tensor, expert and pipeline coordinates."""
        return _groups(self.coords, lambda c: (c.etp, c.ep, c.pp))


def _same(name: str) -> str:
    return name


def _groups(coords: Mapping[int, RankCoord], key: Callable[[RankCoord], tuple[int, ...]]) -> list[tuple[int, ...]]:
    found: dict[tuple[int, ...], list[int]] = {}
    for rank in sorted(coords):
        found.setdefault(key(coords[rank]), []).append(rank)
    return [tuple(ranks) for ranks in found.values() if len(ranks) > 1]


def resolve(metadata: Mapping[str, Any], evidence: Mapping[int, RankEvidence]) -> Resolution:
    """The run's parallel layout and each rank's coordinates and namer."""
    ranks = sorted(evidence)
    notes: list[str] = []
    layout, source_note = _recorded_layout(evidence, notes)
    if layout is None:
        reading = layout_from_metadata(metadata, ranks_seen=(ranks[-1] + 1) if ranks else None)
        notes += reading.notes
        layout = reading.layout
    else:
        stated = layout_from_metadata(metadata, ranks_seen=layout.world_size).layout
        if stated is not None and stated.describe() != layout.describe():
            notes.append(
                f"the metadata states {stated.describe()}, the ranks recorded {layout.describe()}: the ranks' records are used"
            )
        notes.append(source_note)
    outside: list[int] = []
    if layout is not None and ranks and ranks[-1] >= layout.world_size:
        outside = [r for r in ranks if r >= layout.world_size]
        notes.append(
            f"rank(s) {_list(outside)} are outside the stated layout's {layout.world_size} ranks "
            f"({layout.describe()}): the world size contradicts the logs, which win: no rank is placed by it, "
            "the layout is read from the logs alone"
        )
        layout = None
    if layout is None:
        blocks = {r: _blocks(e.layers) for r, e in evidence.items()}
        digests = {r: e.digest for r, e in evidence.items() if e.digest is not None}
        info = infer_layout(blocks, digests)
        info.notes[:0] = notes
        info.outside_ranks = outside
        return Resolution(info)
    return _placed(layout, evidence, notes)


def _placed(layout: ParallelLayout, evidence: Mapping[int, RankEvidence], notes: list[str]) -> Resolution:
    ranks = sorted(evidence)
    coords = {r: rank_coord(layout, r) for r in ranks}
    coords, conflict_notes = _check_recorded(coords, evidence)
    notes += conflict_notes
    missing = [r for r in range(layout.world_size) if r not in evidence] if layout.world_size <= 1 << 16 else []
    if missing:
        notes.append(f"{len(missing)} rank(s) of the layout have no statistics: {_list(missing)}")
    logged: dict[int, set[int]] = {}
    for rank, coord in coords.items():
        logged.setdefault(coord.pp, set()).update(_blocks(evidence[rank].layers))
    layout = _with_layer_count(layout, logged, notes)
    naming: str | None = None
    try:
        check_stages(layout)
    except StageError as exc:
        notes.append(f"the layout cannot place the blocks ({exc}): layers keep their logged names")
    else:
        reading = detect_naming(layout, logged)
        naming = reading.naming
        notes += reading.notes
    experts_local = _experts(layout, coords, evidence, notes)
    info = ParallelInfo(
        METADATA,
        layout,
        naming,
        {r: c.as_dict() for r, c in coords.items()},
        missing_ranks=missing,
        notes=notes,
    )
    return Resolution(info, coords, experts_local)


def _with_layer_count(layout: ParallelLayout, logged: Mapping[int, set[int]], notes: list[str]) -> ParallelLayout:
    """A pipeline layout without `num_layers`: the count the logs show, as an assumption said in a note. Stages
    logging disjoint blocks number them globally (the largest number gives the count); stages logging the same
    numbers number them locally (an even split of the largest stage is assumed)."""
    if layout.pp == 1 or layout.num_layers is not None or layout.stage_counts is not None:
        return layout
    sets = [blocks for blocks in logged.values() if blocks]
    if not sets:
        return layout
    if len(sets) > 1 and sum(map(len, sets)) == len(set().union(*sets)):
        first = min(min(blocks) for blocks in sets)
        count = max(max(blocks) for blocks in sets) + (1 - first if first <= 1 else 1)
        notes.append(f"num_layers not given: {count} blocks assumed from the largest block number the stages log")
    else:
        if layout.first_stage_layers is not None or layout.last_stage_layers is not None:
            return layout
        count = layout.pp * (max(max(blocks) for blocks in sets) + 1)
        notes.append(
            f"num_layers not given: {count} blocks assumed ({layout.pp} stages of {count // layout.pp}, the most "
            "any stage logs)"
        )
    return replace(layout, num_layers=count)


def _experts(
    layout: ParallelLayout, coords: Mapping[int, RankCoord], evidence: Mapping[int, RankEvidence], notes: list[str]
) -> int | None:
    if layout.ep == 1:
        return None
    logged: dict[int, set[int]] = {}
    for rank, coord in coords.items():
        logged.setdefault(coord.ep, set()).update(
            i for name in evidence[rank].layers if (i := expert_index(name)) is not None
        )
    if not any(logged.values()):
        return None
    local = experts_are_local(layout, logged)
    if local is None:
        notes.append("the logged expert numbers fit neither local nor global numbering: experts keep their names")
        return None
    if not local:
        return None
    per_rank = layout.local_experts or (max(max(s) for s in logged.values() if s) + 1)
    if layout.local_experts is None:
        notes.append(f"num_moe_experts not given: assumed {per_rank} experts per expert-parallel rank (from the logs)")
    return per_rank


@functools.lru_cache(maxsize=4096)  # ranks of a stage share their set of names (the ingest hands the same one)
def _blocks(layers: frozenset[str]) -> frozenset[int]:
    return frozenset(found[1] for name in layers if (found := block_index_at(name)) is not None)


def _list(values: list[int]) -> str:
    shown = ", ".join(map(str, values[:16]))
    return shown + (f", ... ({len(values)} in all)" if len(values) > 16 else "")


# --- the ranks' own records --------------------------------------------------------------------------------------

_RECORD_SIZES = {
    "tensor_model_parallel_size": "tensor_model_parallel_size",
    "pipeline_model_parallel_size": "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size": "virtual_pipeline_model_parallel_size",
    "context_parallel_size": "context_parallel_size",
    "expert_model_parallel_size": "expert_model_parallel_size",
    "expert_tensor_parallel_size": "expert_tensor_parallel_size",
    "world_size": "world_size",
    "order": "order",
    "num_layers": "num_layers",
    "num_moe_experts": "num_moe_experts",
}


def _recorded_layout(evidence: Mapping[int, RankEvidence], notes: list[str]) -> tuple[ParallelLayout | None, str]:
    """The layout the ranks recorded themselves, when they agree on it (the first one recorded otherwise)."""
    records = [(r, e.recorded) for r, e in sorted(evidence.items()) if e.recorded]
    if not records:
        return None, ""
    layouts = []
    for _rank, record in records:
        reading = layout_from_metadata({k: record[k] for k in _RECORD_SIZES if k in record})
        if reading.layout is not None:
            layouts.append(reading.layout)
    if not layouts:
        return None, ""
    if len({layout.describe() for layout in layouts}) > 1:
        notes.append("the ranks recorded different layouts: the first rank's record is used")
    return layouts[0], f"layout recorded by {len(records)} rank(s) themselves"


def _check_recorded(
    coords: dict[int, RankCoord], evidence: Mapping[int, RankEvidence]
) -> tuple[dict[int, RankCoord], list[str]]:
    """Coordinates a rank recorded win over the ones its rank number gives (the logs win); two ranks claiming the
    same coordinates are named."""
    notes: list[str] = []
    disagree: list[int] = []
    claimed: dict[tuple[int, ...], list[int]] = {}
    out = dict(coords)
    for rank, coord in coords.items():
        record = evidence[rank].recorded
        if not record:
            continue
        raw = {k: record.get(f"{k}_rank") for k in ("tp", "cp", "dp", "pp", "ep")}
        given = {k: v for k, v in raw.items() if isinstance(v, int) and not isinstance(v, bool) and v >= 0}
        if len(given) != len(raw):
            continue
        mine = {"tp": coord.tp, "cp": coord.cp, "dp": coord.dp, "pp": coord.pp, "ep": coord.ep}
        if given != mine:
            disagree.append(rank)
            out[rank] = RankCoord(
                rank, given["tp"], given["cp"], given["dp"], given["pp"], given["ep"], coord.etp, coord.edp
            )
        claimed.setdefault((given["tp"], given["cp"], given["dp"], given["pp"], given["ep"]), []).append(rank)
    if disagree:
        notes.append(
            f"rank(s) {_list(disagree)} recorded coordinates other than the rank order gives: their records are used"
        )
    for place, ranks in claimed.items():
        if len(ranks) > 1:
            notes.append(
                f"ranks {_list(ranks)} all claim tp={place[0]} cp={place[1]} dp={place[2]} pp={place[3]} ep={place[4]}: "
                "two ranks cannot hold the same place; their own records are kept as given"
            )
    return out, notes
