"""Parallel training jobs: the layout (TP, PP, VPP, DP, EP, CP), each rank's place, and global layer names.

Layout (read in this order): `pipeline_layout` (Megatron's explicit layout string) -> `layout` (`ParallelLayout`
from metadata) -> `ranks` (rank coordinates) -> `stages` (blocks per pipeline stage and virtual stage) -> `naming`
(how logs number blocks and experts; one rank's names -> global) -> `replicas` (digests, replicas stored once,
mismatches) -> `infer` (a layout from the logs alone) -> `info` (`ParallelInfo`, stored with a run) -> `resolve`
(the ingest's one decision). Pure: no web, database or file-system imports.
"""

from __future__ import annotations

from fp8_policy.policy.parallel.info import INFERRED, METADATA, UNKNOWN, ParallelInfo
from fp8_policy.policy.parallel.layout import DEFAULT_ORDER, ParallelLayout, layout_from_metadata
from fp8_policy.policy.parallel.naming import GLOBAL, LAYER_NUMBER, LOCAL, RankNamer, detect_naming
from fp8_policy.policy.parallel.ranks import RankCoord, rank_coord
from fp8_policy.policy.parallel.replicas import group_replicas, rank_digest, replica_mismatches, series_digest
from fp8_policy.policy.parallel.resolve import RankEvidence, Resolution, resolve
from fp8_policy.policy.parallel.stages import StageError, block_home, rank_chunks, stage_blocks

__all__ = [
    "DEFAULT_ORDER",
    "GLOBAL",
    "INFERRED",
    "LAYER_NUMBER",
    "LOCAL",
    "METADATA",
    "UNKNOWN",
    "ParallelInfo",
    "ParallelLayout",
    "RankCoord",
    "RankEvidence",
    "RankNamer",
    "Resolution",
    "StageError",
    "block_home",
    "detect_naming",
    "group_replicas",
    "layout_from_metadata",
    "rank_chunks",
    "rank_coord",
    "rank_digest",
    "replica_mismatches",
    "resolve",
    "series_digest",
    "stage_blocks",
]
