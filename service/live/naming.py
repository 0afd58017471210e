"""A live run's statistics under global layer names, as the finished run will name them.

Belongs here: `global_names(metadata, rank, names)`, which rewrites one piece's metric names from what the rank
logged to the job's global names, so live events, alerts and the detector state name the same layer as the
analysis of the finalized run (whose ingest renames every rank the same way). Must not be here: the rules
themselves (policy/parallel), parsing, the detectors.

A live run knows its layout only from its metadata (`fp8-policy watch --metadata` / LiveUploader's metadata): the
naming convention is decided per rank and piece from the block numbers that rank logs, which on a stage past the
first fit only one convention (policy/parallel/naming.py `detect_naming`); on the first stage every convention
names blocks alike. Without a stated layout, or when the rank's numbers fit no convention, names stay as logged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fp8_policy.policy.names import block_index_at, split_metric_name
from fp8_policy.policy.parallel.layout import layout_from_metadata
from fp8_policy.policy.parallel.naming import RankNamer, detect_naming
from fp8_policy.policy.parallel.ranks import rank_coord
from fp8_policy.policy.parallel.stages import StageError


def global_names(metadata: Mapping[str, Any], rank: int, names: list[str]) -> list[str]:
    """`names` (whole metric names of one piece of `rank`) under the job's global layer names; unchanged when the
    metadata states no pipeline or expert layout, or the rank's block numbers fit no naming convention."""
    layout = layout_from_metadata(metadata).layout
    if layout is None or (layout.pp == 1 and layout.ep == 1) or not 0 <= rank < layout.world_size:
        return names
    coord = rank_coord(layout, rank)
    split = {name: split_metric_name(name) for name in names}
    blocks = {found[1] for metric in split.values() if metric and (found := block_index_at(metric.layer))}
    try:
        naming = detect_naming(layout, {coord.pp: blocks}).naming
    except StageError:
        return names
    if naming is None:
        return names
    namer = RankNamer(layout, coord, naming, layout.local_experts)
    out = []
    for name in names:
        metric = split[name]
        if metric is None:
            out.append(name)
            continue
        layer = namer(metric.layer)
        out.append(layer + name[len(metric.layer) :] if layer != metric.layer else name)
    return out
