"""Per-series signal extraction: warm-up removal, windows, level/max/mean/last, a cheap robust slope and onset.

Input contract: `RunData.series` (iterations ascending and unique, values float64 with NaN/inf kept).
Rules (all numbers from `Thresholds`):
* Warm-up. A point is warm-up when its iteration lies in the first `warmup_fraction` of the run's iteration span,
  or when — for the same (layer, tensor, rank) — it comes before the first point where the un-prefixed
  `scale_inv_min` and `scale_inv_max` are not both exactly 1.0 (delayed scaling has not computed a scale yet:
  bionemo logs 21.47 % gradient underflow at iteration 0 for every layer while scale_inv is 1.0). A series whose
  scale never left 1.0 is all warm-up and is not assessed; the fraction rule alone always leaves a series its last
  point. `Signals.warmup_cut` and each summary's `window` report what was kept.
* Non-finite values are counted (`n_nonfinite`) and left out of every statistic; the iterations where each
  series has them (warm-up included) are kept in `Signals.nonfinite` for the `non_finite` finding.
* Excluded series. A series with no finite point after warm-up is not summarised, but it is not dropped either:
  it is kept in `Signals.excluded` with the reason ("stuck scale": scale_inv never left exactly 1.0; "warm-up":
  no point before the scale first moved; "non-finite": no finite value) and the `level_quantile` of its finite
  points past the fraction rule's cut, so that `coverage.py` reports it when those values reach a band.
* Level. The `level_quantile` (default p95) of the trailing window: the last `window_fraction` of the post-warm-up
  span, widened to at least `min_points` points. A few spikes do not make a layer critical; a sustained level does.
* max / mean / last are over the whole post-warm-up range (`window`).
* Slope (per 1k iterations) is the median-of-thirds slope: (median of the last third − median of the first third)
  / distance of their median iterations. Cheap and robust; the scikit-learn fit in `trends.py` is for projections.
* Censored points: values below `print_resolution / 2` print as 0.0000 and mean "< 5e-5", never zero.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fp8_policy.policy.analysis.findings import Evidence
from fp8_policy.policy.analysis.recipes import STAT_PREFIX, normalize_recipe
from fp8_policy.policy.records import QUANTIZED_TENSORS, MetricName, RunData, Series
from fp8_policy.policy.thresholds import Thresholds

WANTED_STATS: frozenset[str] = frozenset({"underflows%", "overflows%", "scale_inv_min", "scale_inv_max", "mse"})
SCALE_STATS: tuple[str, str] = ("scale_inv_min", "scale_inv_max")


@dataclass(frozen=True, slots=True)
class ExcludedSeries:
    """A series the assessment could not use (see the module docstring), with what its values show anyway."""

    metric: MetricName
    rank: int
    reason: str  # "stuck scale" | "warm-up" | "non-finite"
    iterations: np.ndarray  # finite points past the fraction rule's warm-up cut
    values: np.ndarray
    level: float  # `level_quantile` of the finite points (NaN without any)
    max: float

    def evidence(self) -> Evidence:
        m = self.metric
        window = (int(self.iterations[0]), int(self.iterations[-1])) if self.iterations.size else None
        return Evidence(
            layer=m.layer,
            tensor=m.tensor,
            stat=m.stat + ("_columnwise" if m.columnwise else ""),
            recipe=m.recipe,
            rank=self.rank,
            window=window,
            level_window=window,
            level=self.level,
            max=self.max,
            mean=float(self.values.mean()) if self.values.size else None,
            last=float(self.values[-1]) if self.values.size else None,
            count=int(self.values.size),
        )


@dataclass(frozen=True, slots=True)
class NonFinitePoints:
    """Where one (metric, rank) series logged NaN or ±inf (warm-up included)."""

    metric: MetricName
    rank: int
    iterations: np.ndarray


@dataclass(slots=True)
class SeriesSummary:
    """Statistics of one (metric, rank) series after warm-up; arrays are views of the post-warm-up points."""

    metric: MetricName
    rank: int
    iterations: np.ndarray
    values: np.ndarray
    level_start: int  # index of the first point of the trailing window
    n_nonfinite: int
    level: float
    max: float
    mean: float
    last: float
    start_level: float
    end_level: float
    slope_per_1k: float
    censored: int

    @property
    def n_points(self) -> int:
        return int(self.values.size)

    @property
    def window(self) -> tuple[int, int]:
        return int(self.iterations[0]), int(self.iterations[-1])

    @property
    def level_window(self) -> tuple[int, int]:
        return int(self.iterations[self.level_start]), int(self.iterations[-1])

    def evidence(self, *, rank: bool = False, **extra: object) -> Evidence:
        """Evidence for this series; `rank=True` names the rank, otherwise it stands for the worst rank."""
        m = self.metric
        values: dict[str, object] = dict(
            layer=m.layer,
            tensor=m.tensor,
            stat=m.stat + ("_columnwise" if m.columnwise else ""),
            recipe=m.recipe,
            rank=self.rank if rank else None,
            window=self.window,
            level_window=self.level_window,
            level=self.level,
            max=self.max,
            mean=self.mean,
            last=self.last,
            slope_per_1k=self.slope_per_1k,
            start_level=self.start_level,
            end_level=self.end_level,
        )
        values.update(extra)
        return Evidence(**values)  # type: ignore[arg-type]


class Signals:
    """Summaries by metric (ranks in a list) plus run-wide facts; the lookup layer for every detector."""

    def __init__(
        self,
        summaries: dict[MetricName, list[SeriesSummary]],
        *,
        ranks: tuple[int, ...],
        first_iteration: int,
        last_iteration: int,
        warmup_cut: float,
        n_series: int,
        warmup_only: int = 0,
        excluded: list[ExcludedSeries] | None = None,
        nonfinite: list[NonFinitePoints] | None = None,
        logged_keys: dict[MetricName, str] | None = None,
        stat_prefix: str | None = None,
    ) -> None:
        self.summaries = summaries
        self.ranks = ranks
        self.first_iteration = first_iteration
        self.last_iteration = last_iteration
        self.warmup_cut = warmup_cut
        self.n_series = n_series
        self.warmup_only = warmup_only  # series with no point after warm-up (or no finite one)
        self.excluded = excluded or []  # those series, with their reason and values
        self.nonfinite = nonfinite or []
        self.logged_keys = logged_keys or {}  # canonical metric -> stat key as logged (recipe prefix kept)
        self.stat_prefix = stat_prefix  # the training recipe's stat prefix, dropped from canonical metrics
        self._by_layer: dict[str, list[MetricName]] = defaultdict(list)
        for metric in summaries:
            self._by_layer[metric.layer].append(metric)

    def layer_metrics(self, layer: str) -> list[MetricName]:
        return self._by_layer.get(layer, [])

    def get(self, metric: MetricName) -> list[SeriesSummary]:
        return self.summaries.get(metric, [])

    def worst(
        self,
        layer: str,
        tensor: str,
        stat: str = "underflows%",
        recipe: str | None = None,
        skip_ranks: frozenset[int] = frozenset(),
    ) -> SeriesSummary | None:
        """The series with the highest level across ranks but `skip_ranks` (and row/columnwise) for one
        layer/tensor/stat: per-layer levels use this."""
        both = self.get(MetricName(layer, tensor, stat, recipe, False)) + self.get(
            MetricName(layer, tensor, stat, recipe, True)
        )
        candidates = [s for s in both if s.rank not in skip_ranks] if skip_ranks else both
        return max(candidates, key=_level_key, default=None)

    def logged_stat_key(self, metric: MetricName) -> str:
        """The stat key a canonical metric was logged under (the training recipe's prefix kept)."""
        return self.logged_keys.get(metric, metric.stat_key)

    def metrics(self, stat: str | None = None) -> list[MetricName]:
        return [m for m in self.summaries if stat is None or m.stat == stat]


def _level_key(summary: SeriesSummary) -> float:
    return summary.level if summary.level == summary.level else -np.inf


def extract_signals(run: RunData, thresholds: Thresholds, layer_recipes: Mapping[str, str] | None = None) -> Signals:
    """Summarise every quantization series of the run that analysis uses (see module docstring for the rules).

    `layer_recipes`: layers that trained in another recipe than the run's (a mixed-format run): their own recipe's
    prefix is the one dropped from their canonical metrics."""
    wanted = [
        s
        for s in run.series
        if s.metric.stat in WANTED_STATS and s.metric.tensor in QUANTIZED_TENSORS and s.iterations.size > 0
    ]
    if not wanted:
        return Signals({}, ranks=(), first_iteration=0, last_iteration=0, warmup_cut=0.0, n_series=len(run.series))
    first = int(min(int(s.iterations[0]) for s in wanted))
    last = int(max(int(s.iterations[-1]) for s in wanted))
    cut = first + thresholds.warmup_fraction * (last - first)
    scale_end = _scale_warmup_ends(wanted)
    current = STAT_PREFIX.get(normalize_recipe(run.metadata.get("recipe") or run.metadata.get("fp8_recipe")) or "")
    summaries: dict[MetricName, list[SeriesSummary]] = defaultdict(list)
    excluded: list[ExcludedSeries] = []
    nonfinite: list[NonFinitePoints] = []
    logged_keys: dict[MetricName, str] = {}
    own = {name: STAT_PREFIX.get(recipe) for name, recipe in (layer_recipes or {}).items()}
    for series in wanted:
        metric = _canonical(series.metric, own.get(series.metric.layer, current))
        logged_keys.setdefault(metric, series.metric.stat_key)
        bad = ~np.isfinite(series.values)
        if bad.any():
            nonfinite.append(NonFinitePoints(metric, series.rank, series.iterations[bad]))
        end = scale_end.get((metric.layer, metric.tensor, series.rank), -math.inf)
        summary = summarize(series, metric, max(cut, end), thresholds, keep_last=end <= cut)
        if summary is not None:
            summaries[metric].append(summary)
        else:
            excluded.append(_excluded(series, metric, end, cut, thresholds))
    ranks = tuple(sorted({s.rank for s in wanted}))
    return Signals(
        dict(summaries),
        ranks=ranks,
        first_iteration=first,
        last_iteration=last,
        warmup_cut=cut,
        n_series=len(run.series),
        warmup_only=len(excluded),
        excluded=excluded,
        nonfinite=nonfinite,
        logged_keys=logged_keys,
        stat_prefix=current,
    )


def _excluded(
    series: Series, metric: MetricName, scale_end: float, cut: float, thresholds: Thresholds
) -> ExcludedSeries:
    """A series with no finite point after warm-up, with the reason and the level of its finite points past the
    fraction rule's cut (the first iterations of delayed scaling, scale_inv 1.0 and ~21 % gradient underflow, are
    warm-up, not evidence; a run of one iteration has nothing past it)."""
    finite = np.isfinite(series.values) & (series.iterations > cut)
    its, values = series.iterations[finite], series.values[finite]
    if not np.isfinite(series.values).any():
        reason = "non-finite"
    elif scale_end == math.inf:
        reason = "stuck scale"
    else:
        reason = "warm-up"
    q = thresholds.level_quantile
    level = float("nan") if values.size == 0 else float(values.max() if q >= 1.0 else np.quantile(values, q))
    top = float(values.max()) if values.size else float("nan")
    return ExcludedSeries(metric, series.rank, reason, its, values, level, top)


def _canonical(metric: MetricName, current_prefix: str | None) -> MetricName:
    """A stat prefixed with the training recipe's own prefix is the same as the un-prefixed stat."""
    if current_prefix and metric.recipe == current_prefix:
        return MetricName(metric.layer, metric.tensor, metric.stat, None, metric.columnwise)
    return metric


def _scale_warmup_ends(series: list[Series]) -> dict[tuple[str, str, int], float]:
    """Per (layer, tensor, rank): first iteration where the un-prefixed scale_inv_min and scale_inv_max are not
    both exactly 1.0 (inf when they never left 1.0)."""
    ends: dict[tuple[str, str, int], float] = {}
    for s in series:
        m = s.metric
        if m.stat not in SCALE_STATS or m.recipe is not None or m.columnwise:
            continue
        moved = np.flatnonzero(s.values != 1.0)
        end = float(s.iterations[moved[0]]) if moved.size else math.inf
        key = (m.layer, m.tensor, s.rank)
        ends[key] = min(ends.get(key, math.inf), end)
    return ends


def summarize(
    series: Series, metric: MetricName, start: float, thresholds: Thresholds, *, keep_last: bool = True
) -> SeriesSummary | None:
    """Statistics of one series from iteration `start` on (see module docstring); None if no finite point is left.

    `keep_last` keeps the last point when `start` lies past it (the fraction rule on a short series)."""
    it, values = series.iterations, series.values
    i0 = int(np.searchsorted(it, start, side="left"))
    if i0 >= it.size:
        if not keep_last:
            return None
        i0 = it.size - 1
    it, values = it[i0:], values[i0:]
    finite = np.isfinite(values)
    n_nonfinite = int(values.size - np.count_nonzero(finite))
    if n_nonfinite:
        it, values = it[finite], values[finite]
    if values.size == 0:
        return None
    level_start = _window_start(it, thresholds)
    window = values[level_start:]
    q = thresholds.level_quantile
    level = float(window.max() if q >= 1.0 else np.quantile(window, q))
    start_level, end_level, slope = _thirds(it, values)
    return SeriesSummary(
        metric=metric,
        rank=series.rank,
        iterations=it,
        values=values,
        level_start=level_start,
        n_nonfinite=n_nonfinite,
        level=level,
        max=float(values.max()),
        mean=float(values.mean()),
        last=float(values[-1]),
        start_level=start_level,
        end_level=end_level,
        slope_per_1k=slope,
        censored=int(np.count_nonzero(values < thresholds.censor_below)),
    )


def _window_start(it: np.ndarray, thresholds: Thresholds) -> int:
    """Index where the trailing window starts: last `window_fraction` of the span, at least `min_points` points."""
    begin = it[-1] - thresholds.window_fraction * float(it[-1] - it[0])
    index = int(np.searchsorted(it, begin, side="left"))
    return max(0, min(index, it.size - thresholds.min_points))


def _thirds(it: np.ndarray, values: np.ndarray) -> tuple[float, float, float]:
    """Medians of the first and last thirds and the slope between them per 1k iterations (0 when too short)."""
    n = values.size
    if n < 3:
        return float(values[0]), float(values[-1]), 0.0
    k = n // 3
    head_v, tail_v = np.median(values[:k]), np.median(values[-k:])
    head_i, tail_i = np.median(it[:k]), np.median(it[-k:])
    slope = 1000.0 * (tail_v - head_v) / (tail_i - head_i) if tail_i > head_i else 0.0
    return float(head_v), float(tail_v), float(slope)


def onset(summary: SeriesSummary, threshold: float) -> int | None:
    """First iteration of the first run of `k` points whose majority is at or above `threshold` (k = n/50, ≥ 3).

    A sustained crossing (a rolling-median test done with one cumulative sum), so a lone spike is no onset.
    """
    values = summary.values
    n = values.size
    k = min(n, max(3, n // 50))
    above = values >= threshold
    counts = np.concatenate(([0], np.cumsum(above, dtype=np.int64)))
    majority = np.flatnonzero((counts[k:] - counts[:-k]) * 2 > k)
    if majority.size == 0:
        return None
    begin = int(majority[0])
    first_above = begin + int(np.argmax(above[begin : begin + k]))
    return int(summary.iterations[first_above])
