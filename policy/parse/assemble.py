"""Join one run's parsed statistics (per rank) and metadata into layers and summarised series.

Input: `ParsedStats` per rank (policy/parse/stats_log.py) and the merged `MetadataLog` (policy/parse/metadata_log.py).
Output: `AssembledRun`, ready to store: layers in model order with structure and precision, and one
`SeriesRecord` per (rank, metric) with its summary over finite points. Pure: no I/O, no web or DB.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from fp8_policy.policy.names import layer_structure, order_key, split_metric_name
from fp8_policy.policy.parse import kernels
from fp8_policy.policy.parse.metadata_log import MetadataLog
from fp8_policy.policy.parse.stats_log import ParsedStats, map_series_ranges
from fp8_policy.policy.records import (
    MAX_LAYER_CHARS,
    MAX_STAT_CHARS,
    MAX_TENSOR_CHARS,
    QUANT_STATS,
    LayerInfo,
    LayerPlan,
    MetricName,
    Precision,
    nonfinite_text,
)

MAX_NAME_SAMPLES = 10
SUMMARY_THREADS = 2


@dataclass(frozen=True, slots=True)
class SeriesSummary:
    """Summary of one series; min/max/mean/p95 over finite points, `last` None when non-finite."""

    count: int
    nan_count: int
    posinf_count: int
    neginf_count: int
    min: float | None
    max: float | None
    mean: float | None
    p95: float | None
    last: float | None
    last_nonfinite: str | None  # "NaN" | "Infinity" | "-Infinity"
    first_iteration: int | None
    last_iteration: int | None


@dataclass(slots=True)
class SeriesRecord:
    rank: int
    metric: MetricName
    iterations: np.ndarray
    values: np.ndarray
    summary: SeriesSummary


@dataclass(slots=True)
class AssembledLayer:
    info: LayerInfo
    position: int
    plans: dict[str, str]  # "tensor/gemm" -> plan text


@dataclass(slots=True)
class AssembledRun:
    layers: list[AssembledLayer]
    series: list[SeriesRecord]
    ranks: list[int]
    unsplit_names: list[str] = field(default_factory=list)  # samples of names that are no <layer>_<tensor>_<stat>
    unsplit_points: int = 0

    @property
    def points(self) -> int:
        return sum(int(s.iterations.shape[0]) for s in self.series)


def summarize(iterations: np.ndarray, values: np.ndarray) -> SeriesSummary:
    """The summary of one series (see `summaries` for a rank's series at once)."""
    values = np.ascontiguousarray(values, dtype=np.float64)
    return summaries(np.array([0, values.shape[0]], dtype=np.int64), np.asarray(iterations), values)[0]


def summaries(offsets: np.ndarray, iterations: np.ndarray, values: np.ndarray) -> list[SeriesSummary]:
    """Summaries of the series [offsets[k]:offsets[k+1]]: counts, and min/max/mean/p95 over the finite points
    (equal to NumPy's per series, computed in one compiled pass: policy/parse/_summary_kernel.py)."""
    parts = map_series_ranges(
        offsets,
        SUMMARY_THREADS,
        lambda first, stop: kernels.summary.summarize_series(offsets[first : stop + 1], values),
    )
    counts, stats = np.concatenate([c for c, _ in parts]), np.concatenate([s for _, s in parts])
    out = []
    for k, (finite, nans, posinf, neginf) in enumerate(counts.tolist()):
        lo, hi = int(offsets[k]), int(offsets[k + 1])
        low, high, mean, p95 = stats[k].tolist() if finite else (None, None, None, None)
        last = float(values[hi - 1]) if hi > lo else None
        last_nonfinite = None
        if last is not None and not math.isfinite(last):
            last_nonfinite, last = nonfinite_text(last), None
        out.append(
            SeriesSummary(
                count=hi - lo,
                nan_count=nans,
                posinf_count=posinf,
                neginf_count=neginf,
                min=low,
                max=high,
                mean=mean,
                p95=p95,
                last=last,
                last_nonfinite=last_nonfinite,
                first_iteration=int(iterations[lo]) if hi > lo else None,
                last_iteration=int(iterations[hi - 1]) if hi > lo else None,
            )
        )
    return out


def assemble_run(
    stats_by_rank: dict[int, ParsedStats], metadata: MetadataLog, *, with_layers: bool = True
) -> AssembledRun:
    """Split every distinct name once, summarise every series, and derive the layer table (unless `with_layers`
    is False: the per-rank ingest derives it once, from what every rank stored)."""
    known = metadata.known_layers()
    run = AssembledRun(layers=[], series=[], ranks=sorted(stats_by_rank))
    split_cache: dict[str, MetricName | None] = {}
    for rank in run.ranks:
        parsed = stats_by_rank[rank]
        summary_of = summaries(parsed.offsets, parsed.iterations, parsed.values)
        for k, name in enumerate(parsed.names):
            if name not in split_cache:
                split_cache[name] = _within_limits(split_metric_name(name, known))
            metric = split_cache[name]
            iterations, values = parsed.series(k)
            if metric is None:
                run.unsplit_points += int(iterations.shape[0])
                if name not in run.unsplit_names and len(run.unsplit_names) < MAX_NAME_SAMPLES:
                    run.unsplit_names.append(name)
                continue
            run.series.append(SeriesRecord(rank, metric, iterations, values, summary_of[k]))
    if with_layers:
        run.layers = _layers(run.series, metadata)
    return run


def _within_limits(metric: MetricName | None) -> MetricName | None:
    """A split name whose parts are longer than any real layer/tensor/stat counts as unattributed."""
    if metric is None:
        return None
    if len(metric.layer) > MAX_LAYER_CHARS or len(metric.tensor) > MAX_TENSOR_CHARS:
        return None
    return metric if len(metric.stat_key) <= MAX_STAT_CHARS else None


def _layers(series: list[SeriesRecord], metadata: MetadataLog) -> list[AssembledLayer]:
    """Layers with stats or plan lines, in model order."""
    return layer_table(((s.metric.layer, s.metric.stat, s.metric.recipe) for s in series), metadata)


def layer_table(facts: Iterable[tuple[str, str, str | None]], metadata: MetadataLog) -> list[AssembledLayer]:
    """Layers with stats or plan lines, in model order, from (layer, stat, recipe) of every series (the
    per-rank ingest derives the table from what all ranks stored, so a fact may repeat)."""
    any_quant: set[str] = set()  # any quantization stat, what-if recipes included
    trained_quant: set[str] = set()  # unprefixed: measured on the recipe the layer trained with
    with_stats: set[str] = set()
    for layer, stat, recipe in facts:
        with_stats.add(layer)
        if stat in QUANT_STATS:
            any_quant.add(layer)
            if recipe is None or recipe == "nvfp4":
                trained_quant.add(layer)
    layers = []
    for position, name in enumerate(sorted(with_stats | set(metadata.plans), key=order_key)):
        plan = metadata.plans.get(name)
        precision = _precision(plan, trained_quant=name in trained_quant)
        info = LayerInfo(name, layer_structure(name), precision, name in any_quant)
        plans = {f"{t}/{g}": text for (t, g), text in (plan.gemm_plans.items() if plan else ())}
        layers.append(AssembledLayer(info, position, plans))
    return layers


def _precision(plan: LayerPlan | None, *, trained_quant: bool) -> Precision:
    """Plan lines decide; without them, unprefixed FP8 stats mean the layer was quantized."""
    precision = plan.precision if plan else Precision.UNKNOWN
    if precision is Precision.UNKNOWN and trained_quant:
        return Precision.FP8
    return precision
