"""A parallel job's ranks at ingest: what each logged, the layout and global names, replicas and the ingest report.

Belongs here (no database, no archive): `MetricLayers` (each distinct metric name split once), the evidence
`policy.parallel.resolve` decides from (each rank's logged layer names, from its statistics when parsed, from its
metadata log's `Assigned layer name:` and plan lines otherwise; its own `fp8_policy parallel` record), the
metadata logs renamed rank by rank before they are merged, each rank's digests (`rank_digests`), and `settle`:
replicas stored once, replicas that disagree, and the run's `ParallelInfo` and `ingest_report.parallel`.
The jobs that call these (plan, rank, finalize) are service/ingest/pipeline.py's.

Why rename before merging: under local naming every pipeline stage logs `decoder.layers.0`, so merging the ranks'
metadata (or storing their series) under logged names would mix different blocks (policy/parallel/naming.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fp8_policy.policy.names import split_metric_name
from fp8_policy.policy.parallel import METADATA, RankEvidence, RankNamer, Resolution, resolve
from fp8_policy.policy.parallel.naming import expert_index
from fp8_policy.policy.parallel.replicas import Mismatch, replica_mismatches
from fp8_policy.policy.parse.log_files import classify_log_path
from fp8_policy.policy.parse.metadata_log import MetadataLog, merge_metadata, renamed
from fp8_policy.policy.parse.stats_log import ParsedStats
from fp8_policy.policy.records import MetricName

MAX_LISTED = 64  # ranks named one by one in the ingest report (the run's `parallel` column keeps every one)


class MetricSplit:
    """Each metric name split once per run (with the known layer names of the logged metadata, as assemble_run
    splits them); None for a name that is no `<layer>_<tensor>_<stat>`."""

    def __init__(self, known: frozenset[str]) -> None:
        self.known = known
        self._cache: dict[str, MetricName | None] = {}

    def of(self, names: Iterable[str]) -> list[MetricName | None]:
        out = []
        for name in names:
            if name not in self._cache:
                self._cache[name] = split_metric_name(name, self.known)
            out.append(self._cache[name])
        return out


# --- evidence and resolution -----------------------------------------------------------------------------------
def metadata_by_rank(members: list[tuple[str, str]], logs: Mapping[str, MetadataLog]) -> dict[int, MetadataLog]:
    """Each rank's metadata logs (sessions in order) merged, under the names that rank logged."""
    grouped: dict[int, list[MetadataLog]] = {}
    for _member, streamed in members:
        logfile = classify_log_path(streamed)
        if logfile is not None:
            grouped.setdefault(logfile.rank, []).append(logs[streamed])
    out = {}
    for rank, rank_logs in grouped.items():
        merged = merge_metadata(rank_logs) if len(rank_logs) > 1 else rank_logs[0]
        merged.parallel = next((log.parallel for log in reversed(rank_logs) if log.parallel), None)
        out[rank] = merged
    return out


def gather_evidence(
    ranks: Iterable[int], logged_layers: Mapping[int, frozenset[str]], meta: Mapping[int, MetadataLog]
) -> tuple[dict[int, RankEvidence], list[int]]:
    """Each rank's evidence: the layers its statistics logged (`logged_layers`, for the ranks parsed so far) and
    those its metadata log names (nvdlfw_inspect writes `Assigned layer name:` for every module on every rank, in
    the same numbering as the statistics). Also the ranks with neither."""
    evidence, blind = {}, []
    known: dict[int, frozenset[str]] = {}  # ranks of a stage share their metadata's parsed layers (rank_parse.py)
    joined: dict[tuple[int, int], frozenset[str]] = {}
    for rank in sorted(ranks):
        log = meta.get(rank)
        logged = logged_layers.get(rank, frozenset())
        if log is None:
            layers = logged
        else:
            if id(log.plans) not in known:
                known[id(log.plans)] = log.known_layers()
            pair = (id(logged), id(log.plans))
            if pair not in joined:
                joined[pair] = logged | known[id(log.plans)]
            layers = joined[pair]
        if not layers:
            blind.append(rank)
        evidence[rank] = RankEvidence(layers, log.parallel if log is not None else None)
    return evidence, blind


def resolve_ranks(
    metadata: Mapping[str, Any],
    evidence: dict[int, RankEvidence],
    blind: list[int],
    unparsed: list[int],
) -> Resolution:
    """`resolve`, then what the ingest could not see: ranks neither parsed nor described by a metadata log leave
    a stage's naming untold when no other rank of that stage told it; then every rank keeps its logged names."""
    resolution = resolve(metadata, evidence)
    info = resolution.info
    if unparsed:
        parsed = len(evidence) - len(unparsed)
        info.notes.append(
            f"{parsed} rank(s) parsed while the upload was scanned; the naming of the other {len(unparsed)} was told "
            "from their metadata logs' 'Assigned layer name' and plan lines"
        )
    if blind and info.naming is not None and info.layout is not None and (info.layout.pp > 1 or info.layout.ep > 1):
        told = {c["pp"] for r, c in info.coords.items() if r not in blind and evidence[r].layers}
        untold = sorted({info.coords[r]["pp"] for r in blind if r in info.coords} - told)
        if untold or info.layout.ep > 1:
            info.notes.append(
                f"rank(s) {listed(blind)} logged nothing the plan could read (their statistics are parsed later and "
                "they wrote no metadata log): the naming of every stage could not be checked, so layers keep the "
                "names they were logged under (the layout and naming are not exact)"
            )
            info.naming = None
            resolution.experts_local = None
    return resolution


def global_metadata(
    members: list[tuple[str, str]], logs: Mapping[str, MetadataLog], namer: Callable[[int], Callable[[str], str]]
) -> MetadataLog:
    """The metadata logs merged in session order, each renamed to global names with its rank's namer first. A log
    whose layers another rank already described under the same renaming (data-parallel replicas) is renamed and
    merged once; its line counts still add up."""
    out: list[MetadataLog] = []
    seen: set[tuple[bytes, tuple[int, int]]] = set()
    for _member, streamed in members:
        logfile = classify_log_path(streamed)
        log = logs[streamed]
        if logfile is None:
            out.append(log)
            continue
        rename = namer(logfile.rank)
        key = (log.content_key, namer_key(rename)) if log.content_key is not None else None
        if key is not None and key in seen:
            out.append(MetadataLog(lines_read=log.lines_read, lines_unrecognised=log.lines_unrecognised))
            continue
        if key is not None:
            seen.add(key)
        out.append(renamed(log, rename))
    return merge_metadata(out)


def namer_key(namer: Callable[[str], str]) -> tuple[int, int]:
    return namer.key if isinstance(namer, RankNamer) else (0, 0)


# --- digests ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RankDigests:
    """A rank's statistics in digests: `key` under global names (equal keys: replicas, stored once); over its
    series as logged: `dense` (dense layers), `experts` (expert GEMMs; None without any) and `reduced` (the dense
    layers' activation and gradient statistics, which TE reduces over the reduction group). Compared within
    replica groups, whose ranks share a stage and expert rank, so logged and global names agree among them."""

    key: str
    dense: str
    experts: str | None
    reduced: str
    last_iteration: int | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_REDUCED_TENSORS = frozenset({"activation", "gradient"})


def rank_digests(
    content: bytes, parsed: ParsedStats, metrics: list[MetricName | None], rename: Callable[[str], str]
) -> RankDigests:
    h = hashlib.sha256(content)
    for metric in metrics:
        h.update(b"\x1e" + (rename(metric.layer) if metric is not None else "").encode("utf-8", "surrogatepass"))
    n = len(metrics)
    expert = np.fromiter((m is not None and expert_index(m.layer) is not None for m in metrics), bool, n)
    reduced = np.fromiter((m is not None and m.tensor in _REDUCED_TENSORS for m in metrics), bool, n) & ~expert
    last = int(parsed.iterations.max()) if parsed.points else None
    dense = _subset(parsed, ~expert) if expert.any() else content.hex()
    experts = _subset(parsed, expert) if expert.any() else None
    return RankDigests(h.hexdigest()[:32], dense, experts, _subset(parsed, reduced), last)


def _subset(parsed: ParsedStats, mask: np.ndarray) -> str:
    h = hashlib.sha256()
    offsets = parsed.offsets.tolist()
    its, vals = parsed.iterations, parsed.values
    for k in np.flatnonzero(mask).tolist():
        lo, hi = offsets[k], offsets[k + 1]
        name = parsed.names[k].encode("utf-8", "surrogatepass")
        h.update(len(name).to_bytes(4, "little") + name)
        h.update((hi - lo).to_bytes(8, "little"))
        h.update(its[lo:hi].tobytes())
        h.update(vals[lo:hi].tobytes())
    return h.hexdigest()[:32]


def listed(ranks: Iterable[int]) -> str:
    ranks = sorted(ranks)
    shown = ", ".join(map(str, ranks[:16]))
    return shown + (f", ... ({len(ranks)} in all)" if len(ranks) > 16 else "")


# --- settling: replicas, mismatches, the report ----------------------------------------------------------------
@dataclass(slots=True)
class Settled:
    """What the finalize step stores: the run's `parallel` JSON, its report entry, the ranks whose stored series
    repeat another stored rank's (removed), and the number of ranks that repeat a stored one."""

    info: dict[str, Any]
    report: dict[str, Any]
    drop: list[int]
    replica_count: int


def settle(resolution: Resolution, results: Mapping[int, Mapping[str, Any]]) -> Settled:
    """From every rank's digests (`results[rank]["parallel"]`, as rank_result stores them): replicas (the same
    global key; the lowest stored rank is kept), replica groups that disagree, ranks that end early."""
    info = resolution.info
    digests = {r: res["parallel"] for r, res in results.items() if res.get("parallel")}
    keys = {r: bytes.fromhex(d["key"]) for r, d in digests.items()}
    stored = sorted(r for r, d in digests.items() if d.get("stored"))
    first: dict[bytes, int] = {}
    for rank in stored:
        first.setdefault(keys[rank], rank)
    replicas = {r: first[k] for r, k in sorted(keys.items()) if k in first and first[k] != r}
    drop = [r for r in stored if r in replicas]
    orphans = sorted(r for r, k in keys.items() if k not in first)
    if orphans:  # cannot happen: a key's ranks include the one stored for it; said rather than lost silently
        info.notes.append(f"rank(s) {listed(orphans)} repeat no stored rank")
    info.replicas = replicas
    last = {r: d["last_iteration"] for r, d in digests.items() if d.get("last_iteration") is not None}
    end = max(last.values(), default=None)
    early = {r: it for r, it in sorted(last.items()) if end is not None and it < end}
    if early:
        info.notes.append(
            f"rank(s) {listed(early)} end before iteration {end} (the last of the other ranks): a truncated or "
            "stopped rank's file, stored as logged"
        )
    _replica_verdicts(resolution, digests, early)
    report = _report(resolution, results, stored, replicas, early)
    return Settled(info.to_json(), report, drop, len(replicas))


def _replica_verdicts(
    resolution: Resolution, digests: Mapping[int, Mapping[str, Any]], early: Mapping[int, int]
) -> None:
    """Replica groups that disagree, from three comparisons: data-parallel groups over their dense layers, the
    expert data-parallel groups over their experts, and the tensor-and-data-parallel group of each stage over the
    dense layers' activation and gradient statistics (TE reduces those over the reduction group, which Megatron
    sets to that group: `set_tensor_reduction_group(get_tensor_and_data_parallel_group())`). The last one decides
    groups of two data-parallel ranks that cannot outvote each other; where it finds no majority (statistics
    reduced over data-parallel ranks only) it says nothing."""
    info = resolution.info
    if info.source != METADATA or not resolution.coords:
        return
    if info.naming is None:
        info.notes.append("replica groups were not compared: the stated layout could not be checked against the logs")
        return
    dense = {r: bytes.fromhex(d["dense"]) for r, d in digests.items()}
    experts = {r: bytes.fromhex(d["experts"]) for r, d in digests.items() if d.get("experts")}
    reduced = {r: bytes.fromhex(d["reduced"]) for r, d in digests.items() if d.get("reduced")}
    dp = replica_mismatches(resolution.dense_groups(), dense, "dense layers")
    wide_groups = _groups(resolution, lambda c: (c.cp, c.pp))
    wide = replica_mismatches(wide_groups, reduced, "activation and gradient statistics of the dense layers")
    told = {r for group in set(wide_groups) - set(wide.unreduced) - set(wide.undecided) for r in group}
    verdicts = [dp, replica_mismatches(resolution.expert_groups(), experts, "experts") if experts else None]
    flagged: set[int] = set()
    for mismatch in [*dp.mismatches, *wide.mismatches, *(verdicts[1].mismatches if verdicts[1] else ())]:
        faulty = tuple(r for r in mismatch.differing if r not in early and r not in flagged)
        if not faulty:
            continue
        flagged.update(faulty)
        info.mismatches.append(Mismatch(mismatch.group, mismatch.agreeing, faulty, mismatch.what))
        info.notes.append(
            f"rank(s) {listed(faulty)} logged {mismatch.what} other than their replicas {listed(mismatch.agreeing)}, "
            "which agree: after TE's reduction replicas log the same values, so this is a fault on those ranks (a "
            "desynchronised replica, silent data corruption), not a precision problem"
        )
    for verdict in verdicts:
        if verdict is None:
            continue
        if verdict.unreduced:
            info.unreduced = True
            info.notes.append(
                f"no two ranks agree in {len(verdict.unreduced)} data-parallel group(s) (e.g. ranks "
                f"{listed(verdict.unreduced[0])}): the statistics were logged per rank (not reduced over the "
                "data-parallel group), so differing replicas are no fault"
            )
        for group in verdict.undecided:
            if set(group) <= told or set(group) & (flagged | set(early)):
                continue
            info.notes.append(
                f"ranks {listed(group)} should log the same statistics and do not; with no majority the logs cannot "
                "say which one is wrong (or whether the statistics were reduced at all)"
            )


def _groups(resolution: Resolution, key: Callable[[Any], tuple[int, ...]]) -> list[tuple[int, ...]]:
    found: dict[tuple[int, ...], list[int]] = {}
    for rank in sorted(resolution.coords):
        found.setdefault(key(resolution.coords[rank]), []).append(rank)
    return [tuple(ranks) for ranks in found.values() if len(ranks) > 1]


def _report(
    resolution: Resolution,
    results: Mapping[int, Mapping[str, Any]],
    stored: list[int],
    replicas: Mapping[int, int],
    early: Mapping[int, int],
) -> dict[str, Any]:
    info = resolution.info
    layout = info.layout
    world = layout.world_size if layout is not None and info.source == METADATA else None
    claimed: dict[tuple[int, ...], list[int]] = {}
    for rank, coord in info.coords.items():
        claimed.setdefault(tuple(coord.get(k, 0) for k in ("tp", "cp", "dp", "pp", "ep")), []).append(rank)
    in_scan = sum(1 for res in results.values() if (res.get("parallel") or {}).get("scanned"))
    return {
        "source": info.source,
        "layout": layout.describe() if layout is not None else None,
        "naming": info.naming,
        "exact": info.exact,
        "world_size": world,
        "ranks": len(results),
        "ranks_stored": len([r for r in stored if r not in replicas]),
        "replicas": len(replicas),
        "parsed_in_scan": in_scan,
        "parsed_by_rank_jobs": len(results) - in_scan,
        "missing_ranks": info.missing_ranks[:MAX_LISTED],
        "missing_count": len(info.missing_ranks),
        "outside_ranks": info.outside_ranks[:MAX_LISTED],
        "duplicate_coordinates": [sorted(ranks) for ranks in claimed.values() if len(ranks) > 1][:MAX_LISTED],
        "ends_early": {str(r): it for r, it in list(early.items())[:MAX_LISTED]},
        "mismatches": [m.as_dict() for m in info.mismatches[:MAX_LISTED]],
        "unreduced": info.unreduced,
        "notes": info.notes,
    }
