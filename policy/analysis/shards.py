"""The analysis' view of a parallel job: tensor- and context-parallel shards combined per layer, replicas that
disagree left out, and the findings and notes that say so.

Belongs here: `parallel_view(run)` (the run as the analysis reads it) and `parallel_findings(...)` (a replica that
disagrees with its data-parallel group; one tensor-parallel shard that stands out among its group's shards). Must
not be here: the layout, coordinates and replica grouping (policy/parallel/), the outlier test (outliers.py).

Rules:
* Input. `RunData.parallel` (policy/parallel/info.py): layer names already global, data-parallel replicas stored
  once (`replicas`), replicas that disagree named in `mismatches`. Without it (`None`) the run is read as before:
  every rank a replica of the whole model, a layer's level the worst rank's.
* Shards. Ranks whose coordinates differ only in their tensor- or context-parallel rank hold shards (slices) of the
  same tensors and log them under the same global name: a shard group is the ranks with the same (pp, dp, ep).
  Each (layer, tensor, stat) is combined over the group's shards at the iterations every shard logged, with the rule
  of the statistic (TE's LogFp8TensorStats, transformer_engine/debug/features/log_fp8_tensor_stats.py, computes
  each over the rank's own tensor): `underflows%`, `overflows%` and `mse` are fractions and means over elements, so
  over equal shards the whole tensor's value is their mean; `*_num` and `total_square_error` are counts and sums,
  added; `scale_inv_min` the min of the shards' mins and `scale_inv_max` the max of their maxes (likewise `min`,
  `max` / `cur_amax`). Other statistics stay per shard. A combined series carries the group's lowest rank. Statistics
  already reduced over the tensor-parallel group (Megatron's default reduction group) are equal on every shard and
  combine to themselves. With expert tensor parallelism different from tensor parallelism, the dense data-parallel
  coordinate is used for experts too (an approximation: the layout names it).
* A shard that stands out: within each shard group of at least `rank_outlier_min_ranks` shards, the outlier test of
  outliers.py (LOF over the shards' levels, the same consistency rule) on the shards' own `underflows%`. It is a
  `rank_outlier` finding naming the shard; the layer's level stays the shards' mean (the slice's values are real
  data of the layer, not a fault).
* Replica mismatch: the ranks of `ParallelInfo.mismatches[].differing` logged statistics other than their
  data-parallel replicas agree on. After the reduction replicas must log identical values, so this is a fault in the
  job (a desynchronised replica, silent data corruption), not precision: a `replica_mismatch` finding (critical)
  names the ranks with the largest differences as evidence, their statistics are left out of every level, and no
  layer moves because of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fp8_policy.policy.analysis.findings import Evidence, Finding, Pattern
from fp8_policy.policy.analysis.formats import format_view
from fp8_policy.policy.analysis.outliers import detect_rank_outliers
from fp8_policy.policy.analysis.signals import WANTED_STATS, Signals, extract_signals, summarize
from fp8_policy.policy.parallel.caveat import layout_caveat
from fp8_policy.policy.parallel.info import ParallelInfo
from fp8_policy.policy.parallel.replicas import Mismatch
from fp8_policy.policy.records import QUANTIZED_TENSORS, RunData, Series
from fp8_policy.policy.thresholds import Severity, Thresholds

COMBINE: dict[str, str] = {
    "underflows%": "mean",
    "overflows%": "mean",
    "mse": "mean",
    "underflows_num": "sum",
    "overflows_num": "sum",
    "total_square_error": "sum",
    "scale_inv_min": "min",
    "scale_inv_max": "max",
    "min": "min",
    "max": "max",
    "cur_amax": "max",
}
_REDUCE: dict[str, Callable[..., Any]] = {"mean": np.mean, "sum": np.sum, "min": np.min, "max": np.max}
MAX_MISMATCH_EVIDENCE = 3
_OUTLIER_STATS = frozenset({"underflows%", "scale_inv_min", "scale_inv_max"})  # the test's feature and warm-up rule


@dataclass(slots=True)
class ParallelView:
    """The run as the analysis reads it (`run`), the run as stored (`source`: the differing replicas included),
    and what was done to get from one to the other."""

    run: RunData
    source: RunData = field(repr=False)
    info: ParallelInfo | None = None
    groups: list[tuple[int, ...]] = field(default_factory=list)  # shard groups combined (ranks, ascending)
    shard_series: list[Series] = field(default_factory=list)  # the groups' series before combining
    left_out: dict[int, Mismatch] = field(default_factory=dict)  # rank -> the mismatch that left it out
    notes: list[str] = field(default_factory=list)


def parallel_view(run: RunData) -> ParallelView:
    """`run` with shards combined and disagreeing replicas left out (the same object when nothing changes)."""
    info = run.parallel
    if info is None:
        return ParallelView(run, run)
    view = ParallelView(run, run, info)
    caveat = layout_caveat(info)
    if caveat:
        view.notes.append(caveat[0].upper() + caveat[1:] + ".")
    view.left_out = {rank: m for m in info.mismatches for rank in m.differing}
    series = [s for s in run.series if s.rank not in view.left_out] if view.left_out else run.series
    view.groups = shard_groups(info, {s.rank for s in series})
    if view.groups:
        grouped = {rank for group in view.groups for rank in group}
        view.shard_series = [s for s in series if s.rank in grouped]
        series, partial = combine_shards(series, view.groups)
        sizes = sorted({len(g) for g in view.groups})
        view.notes.append(
            f"Tensor-/context-parallel shards combined per layer over {len(view.groups)} group(s) of "
            f"{'/'.join(map(str, sizes))} ranks (same pipeline, data and expert coordinates): underflows%, "
            "overflows% and mse are the shards' mean (the whole tensor's value), scale_inv_min the min and "
            "scale_inv_max the max; a combined series carries its group's lowest rank."
        )
        if partial:
            view.notes.append(
                f"{partial} layer series were logged by only some shards of their group (or at different "
                "iterations): combined over the shards and iterations that logged them."
            )
    if view.left_out or view.groups:
        view.run = replace(run, series=series)
    return view


def shard_groups(info: ParallelInfo, ranks: set[int]) -> list[tuple[int, ...]]:
    """Groups of at least two present ranks with the same (pp, dp, ep) coordinates and tensor/context coordinates
    of their own (the layout must be known: coordinates with `tp`)."""
    if info.layout is None or info.layout.tp * info.layout.cp == 1:
        return []
    found: dict[tuple[int, int, int], list[int]] = {}
    for rank in sorted(ranks):
        coord = info.coords.get(rank)
        if coord is None or "tp" not in coord:
            continue
        found.setdefault((coord.get("pp", 0), coord.get("dp", 0), coord.get("ep", 0)), []).append(rank)
    return [tuple(group) for group in found.values() if len(group) > 1]


def combine_shards(series: list[Series], groups: list[tuple[int, ...]]) -> tuple[list[Series], int]:
    """Every series of a group's ranks combined with its statistic's rule (module docstring); the number of
    combined series some shard did not log (or logged at other iterations) is returned with them."""
    group_of = {rank: k for k, group in enumerate(groups) for rank in group}
    out: list[Series] = []
    buckets: dict[tuple[int, object], list[Series]] = {}
    for s in series:
        k = group_of.get(s.rank)
        if k is None or s.metric.stat not in COMBINE:
            out.append(s)
        else:
            buckets.setdefault((k, s.metric), []).append(s)
    partial = 0
    for (k, _metric), members in buckets.items():
        combined, whole = _combined(members, groups[k][0], len(groups[k]))
        out.extend([combined] if combined is not None else members)
        partial += int(not whole)
    return out, partial


def _combined(members: list[Series], rank: int, size: int) -> tuple[Series | None, bool]:
    """(the combined series or None when the shards share no iteration, whether every shard logged all of it)."""
    first = members[0]
    common = first.iterations
    for member in members[1:]:
        common = np.intersect1d(common, member.iterations, assume_unique=True)
    whole = len(members) == size and all(m.iterations.size == common.size for m in members)
    if common.size == 0:
        return None, False
    stack = np.vstack([m.values[np.searchsorted(m.iterations, common)] for m in members])
    values = _REDUCE[COMBINE[first.metric.stat]](stack, axis=0)
    return Series(rank, first.metric, common, np.asarray(values, dtype=np.float64)), whole


def drawn_series(info: ParallelInfo | None, series: list[Series]) -> list[Series]:
    """A parallel job's series as every view draws them across ranks (the heatmap's cells): the replicas that
    disagree left out and shards combined with their statistic's rule, as `parallel_view` reads them for the
    analysis, so a cell's colour is the level the layer table and the boxes judge (not the worst shard's)."""
    if info is None:
        return series
    left_out = {rank for m in info.mismatches for rank in m.differing}
    kept = [s for s in series if s.rank not in left_out] if left_out else series
    groups = shard_groups(info, {s.rank for s in kept})
    return combine_shards(kept, groups)[0] if groups else kept


def parallel_findings(view: ParallelView, cut: float, thresholds: Thresholds, fp8_layers: list[str]) -> list[Finding]:
    """Replica mismatches (evidence summarised from iteration `cut` on) and shards that stand out."""
    if view.info is None:
        return []
    findings = [
        Finding(Pattern.REPLICA_MISMATCH, Severity.CRITICAL, (), tuple(ev), _mismatch_text(m, ev))
        for m in view.info.mismatches
        for ev in [_differences(view, m, cut, thresholds)]
    ]
    return findings + _shard_outliers(view, thresholds, fp8_layers)


def _differences(view: ParallelView, mismatch: Mismatch, cut: float, thresholds: Thresholds) -> list[Evidence]:
    """The differing ranks' series whose level differs most from the agreeing replicas' (largest first)."""
    assert view.info is not None
    reference = view.info.representative(min(mismatch.agreeing))
    wanted = {reference, *mismatch.differing}
    by_rank: dict[int, dict[object, Series]] = {}
    for s in view.source.series:
        if s.rank in wanted and s.metric.stat in WANTED_STATS and s.metric.tensor in QUANTIZED_TENSORS:
            by_rank.setdefault(s.rank, {})[s.metric] = s
    found: list[tuple[float, Evidence]] = []
    agreed = by_rank.get(reference, {})
    for rank in mismatch.differing:
        for metric, s in by_rank.get(rank, {}).items():
            other = agreed.get(metric)
            if other is None:
                continue
            mine, theirs = summarize(s, s.metric, cut, thresholds), summarize(other, other.metric, cut, thresholds)
            if mine is None or theirs is None or not abs(mine.level - theirs.level) > 0:
                continue
            found.append((abs(mine.level - theirs.level), mine.evidence(rank=True, reference=theirs.level)))
    found.sort(key=lambda item: -item[0])
    return [ev for _gap, ev in found[:MAX_MISMATCH_EVIDENCE]]


def _mismatch_text(mismatch: Mismatch, evidence: list[Evidence]) -> str:
    many = len(mismatch.differing) > 1
    who = f"rank{'s' if many else ''} {_ranks(mismatch.differing)}"
    text = (
        f"Replica mismatch ({mismatch.what}): {who} logged statistics other than what {'their' if many else 'its'} "
        f"data-parallel replicas (ranks {_ranks(mismatch.agreeing)}) agree on. After the data-parallel reduction "
        "replicas log identical values, so this is a fault in the job (a desynchronised replica or silent data "
        f"corruption on {'those ranks' if many else 'that rank'}), not a precision problem: check the GPU and the "
        "gradient synchronisation of the rank(s) named. Their statistics are left out of every layer level, and no "
        "layer moves because of them."
    )
    if evidence:
        top = evidence[0]
        text += (
            f" Largest difference: {top.layer} {top.tensor} {top.stat} {top.level:.4g} on rank {top.rank} vs "
            f"{top.reference:.4g} on its replicas."
        )
    return text


def _shard_outliers(view: ParallelView, thresholds: Thresholds, fp8_layers: list[str]) -> list[Finding]:
    big = [g for g in view.groups if len(g) >= thresholds.rank_outlier_min_ranks]
    if not big or view.info is None:
        return []
    wanted = {rank for group in big for rank in group}
    series = [s for s in view.shard_series if s.rank in wanted and s.metric.stat in _OUTLIER_STATS]
    shards, _training = format_view(replace(view.source, series=series, parallel=None))
    signals = extract_signals(shards, thresholds)
    findings = []
    for group in big:
        members = set(group)
        summaries = {m: kept for m, ss in signals.summaries.items() if (kept := [s for s in ss if s.rank in members])}
        group_signals = Signals(
            summaries,
            ranks=group,
            first_iteration=signals.first_iteration,
            last_iteration=signals.last_iteration,
            warmup_cut=signals.warmup_cut,
            n_series=len(summaries),
        )
        found, _excluded = detect_rank_outliers(fp8_layers, group_signals, thresholds)
        pp = view.info.coords.get(group[0], {}).get("pp", 0)
        for finding in found:
            text = finding.summary.replace(" ranks on ", " shards on ", 1)
            text = (
                f"Among the {len(group)} tensor-parallel shards of pipeline stage {pp} (ranks {_ranks(group)}), "
                f"{text} Each shard is its own slice of the tensor: the layer's level is the shards' mean, which "
                "this slice raises; check that slice's data (outliers of its own) and that rank's hardware."
            )
            findings.append(replace(finding, summary=text))
    return findings


def _ranks(ranks: tuple[int, ...] | list[int]) -> str:
    shown = ", ".join(map(str, ranks[:12]))
    return shown + (f", ... ({len(ranks)} in all)" if len(ranks) > 12 else "")
