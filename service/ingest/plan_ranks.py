"""What the plan job stores once its scan has parsed the ranks it could (service/ingest/scan_ranks.py).

Belongs here: `plan_ranks`, from the scan's parsed ranks and metadata logs to the run's layout and global names
(`policy.parallel.resolve`), the metadata renamed rank by rank and merged, each rank's digests, replicas among the
parsed ranks (`group_replicas`: only the first rank of each is assembled, encoded and stored), the result every
parsed rank's job is recorded done with, and the ranks left to their own jobs. Work grows with the distinct
contents and stored ranks; a replica costs its digest. No database: pipeline.py stores a `PlannedRanks`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fp8_policy.db.series_rows import EncodedSeries, encode_series
from fp8_policy.policy.parallel import Resolution
from fp8_policy.policy.parallel.replicas import group_replicas
from fp8_policy.policy.parse.assemble import assemble_run
from fp8_policy.policy.parse.metadata_log import MetadataLog
from fp8_policy.policy.records import MetricName
from fp8_policy.service.ingest.archive.stream import ArchiveScan
from fp8_policy.service.ingest.metadata_codec import metadata_to_json
from fp8_policy.service.ingest.parallel_ranks import (
    MetricSplit,
    RankDigests,
    gather_evidence,
    global_metadata,
    metadata_by_rank,
    namer_key,
    rank_digests,
    resolve_ranks,
)
from fp8_policy.service.ingest.rank_parse import MetadataReader, rank_result
from fp8_policy.service.ingest.scan_ranks import Content, ScanRanks


@dataclass(slots=True)
class PlannedRanks:
    resolution: Resolution
    metadata: MetadataLog  # every rank's metadata merged under global names: the layer table's plans
    logged: MetadataLog  # merged under logged names: splits metric names (rank jobs need it)
    stored: dict[int, list[EncodedSeries]]  # ranks the plan job stores, under global names
    results: dict[int, dict[str, Any]]  # every rank the scan parsed: its job's result (replicas included)
    pending: list[int]  # ranks left to their own jobs

    def plan_result(self) -> dict[str, Any]:
        """What the plan job's result keeps for the jobs after it (rank jobs rename with the same namers)."""
        out: dict[str, Any] = {
            "metadata_log": metadata_to_json(self.metadata),
            "parallel": {"info": self.resolution.info.to_json(), "experts_local": self.resolution.experts_local},
        }
        if self.pending:
            out["metadata_logged"] = metadata_to_json(self.logged)
        return out


def plan_ranks(
    run_metadata: Mapping[str, Any], scan: ArchiveScan, ranks: ScanRanks, reader: MetadataReader
) -> PlannedRanks:
    """Resolve the layout from everything the scan read, then prepare the distinct parsed ranks for storing."""
    logged = reader.merged(scan.metadata)
    split = MetricSplit(logged.known_layers())
    metrics: dict[bytes, list[MetricName | None]] = {}  # per content, its series' split names
    content_sets: dict[bytes, frozenset[str]] = {}
    for scanned in ranks.ranks.values():
        content = scanned.content
        if content.digest not in metrics:
            assert content.parsed is not None  # kept until its ranks are stored (below)
            metrics[content.digest] = split.of(content.parsed.names)
            content_sets[content.digest] = frozenset(m.layer for m in metrics[content.digest] if m is not None)
    logged_layers = {rank: content_sets[s.content.digest] for rank, s in ranks.ranks.items()}
    evidence, blind = gather_evidence(scan.stats, logged_layers, metadata_by_rank(scan.metadata, reader.logs))
    for rank, scanned in ranks.ranks.items():
        evidence[rank].digest = scanned.content.digest
    pending = sorted(ranks.left)
    resolution = resolve_ranks(run_metadata, evidence, blind, pending)
    namers = _Namers(resolution)
    metadata = global_metadata(scan.metadata, reader.logs, namers.of)

    digests: dict[int, RankDigests] = {}
    cache: dict[tuple[bytes, tuple[int, int]], RankDigests] = {}
    for rank, scanned in sorted(ranks.ranks.items()):
        content, namer = scanned.content, namers.of(rank)
        key = (content.digest, namer_key(namer))
        if key not in cache:
            assert content.parsed is not None
            cache[key] = rank_digests(content.digest, content.parsed, metrics[content.digest], namer)
        digests[rank] = cache[key]
    replicas = group_replicas({rank: bytes.fromhex(d.key) for rank, d in digests.items()})

    stored: dict[int, list[EncodedSeries]] = {}
    results: dict[int, dict[str, Any]] = {}
    for content in list(ranks.contents.values()):
        unsplit = _store_content(content, replicas, logged, namers.of, stored)
        for rank in content.ranks:
            scanned = ranks.ranks[rank]
            result = rank_result(scanned.reports, content.duplicated, *unsplit)
            stored_here = rank not in replicas
            result["parallel"] = {**digests[rank].as_dict(), "stored": stored_here, "scanned": True}
            results[rank] = result
    ranks.contents.clear()
    return PlannedRanks(resolution, metadata, logged, stored, results, pending)


def _store_content(
    content: Content,
    replicas: Mapping[int, int],
    logged: MetadataLog,
    namer: Callable[[int], Callable[[str], str]],
    stored: dict[int, list[EncodedSeries]],
) -> tuple[list[str], int]:
    """Assemble and encode the ranks of `content` that are stored (not replicas), then let its arrays go;
    returns the names no layer could be told from, and their points (the same for every rank of the content)."""
    parsed = content.parsed
    assert parsed is not None
    unsplit: tuple[list[str], int] = ([], 0)
    for rank in sorted(r for r in content.ranks if r not in replicas):
        assembled = assemble_run({rank: parsed}, logged, with_layers=False)
        stored[rank] = encode_series(assembled.series, namer(rank))
        unsplit = (assembled.unsplit_names, assembled.unsplit_points)
    content.parsed = None
    return unsplit


class _Namers:
    """One namer per rank, shared by the ranks that rename alike (each namer caches the names it decomposed)."""

    def __init__(self, resolution: Resolution) -> None:
        self.resolution = resolution
        self._by_rank: dict[int, Callable[[str], str]] = {}
        self._by_key: dict[tuple[int, int], Callable[[str], str]] = {}

    def of(self, rank: int) -> Callable[[str], str]:
        found = self._by_rank.get(rank)
        if found is None:
            namer = self.resolution.namer(rank)
            found = self._by_rank[rank] = self._by_key.setdefault(namer_key(namer), namer)
        return found
