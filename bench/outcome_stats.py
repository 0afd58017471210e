"""The statistics of `make eval-outcomes` (bench/eval_outcomes.py): rank correlation, and comparing two arms trained
under the same replicates (paired), so that a difference smaller than the run-to-run noise is not called a win or a
loss.

Why paired replicates: on models this small, one training run's held-out loss moves by a few hundredths of a nat
when only the data order or the stochastic-rounding stream changes, as much as the effects being compared. Every
replicate trains every arm from the same initial weights with its own data order and rounding stream; an arm's gap
to BF16 is taken within the replicate (the BF16 arm saw the same batches), and two arms are compared through their
per-replicate differences. "As good in loss" = the mean difference is not above zero by more than the one-sided
95 % Student-t bound of its standard error (with one replicate: not above zero at all).

How far any prediction can agree with such a measurement: `split_half` ranks the arms twice, once on the mean gaps
of the even replicates and once on the odd ones, and correlates the two orders. Two halves of the same experiment
disagree only by noise, so their agreement (stepped up to the full replicate count with the Spearman-Brown formula)
estimates the reliability of the measured order, and its square root the highest correlation a perfect predictor of
the true gaps could expect with it (the attenuation ceiling of classical test theory: Spearman 1904, "The proof
and measurement of association between two things"; applied to ranks, an approximation).

scipy (a dependency of scikit-learn, itself a core dependency) provides the rank correlation and the t quantiles.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats

CONFIDENCE = 0.95


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rho with average ranks for ties (infinite values rank last); None with fewer than 3 pairs or a
    constant side."""
    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    return float(stats.spearmanr(xs, ys).statistic)


def mean_and_se(values: Sequence[float]) -> tuple[float, float | None]:
    """The mean and its standard error (None with one value); a non-finite value makes the mean infinite."""
    if not all(math.isfinite(v) for v in values):
        return math.inf, None
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None)


@dataclass(frozen=True)
class Paired:
    """`a` minus `b` over the replicates both were trained in."""

    mean: float
    se: float | None
    bound: float  # the one-sided upper bound of the noise: t(CONFIDENCE, n - 1) * se; 0 with one replicate
    n: int

    @property
    def not_worse(self) -> bool:
        """`a` is as good as `b` within the noise: the mean difference is at most the bound."""
        return self.mean <= self.bound

    @property
    def better(self) -> bool:
        """`a` is better than `b` beyond the noise (with one replicate, where the bound is 0: lower at all)."""
        return self.mean < -self.bound


def paired(a: Sequence[float], b: Sequence[float]) -> Paired:
    """Compare two arms' per-replicate gaps (lower is better); a diverged replicate (non-finite) is infinitely
    worse."""
    if len(a) != len(b) or not a:
        raise ValueError("paired comparison needs the same replicates on both sides")
    diffs = []
    for x, y in zip(a, b, strict=True):
        if not math.isfinite(x) or not math.isfinite(y):
            diffs.append(0.0 if not math.isfinite(x) and not math.isfinite(y) else math.copysign(math.inf, x - y))
        else:
            diffs.append(x - y)
    mean, se = mean_and_se(diffs) if all(math.isfinite(d) for d in diffs) else (statistics.fmean(diffs), None)
    bound = float(stats.t.ppf(CONFIDENCE, len(diffs) - 1)) * se if se is not None else 0.0  # se: 2+ finite
    return Paired(mean, se, bound, len(diffs))


@dataclass(frozen=True)
class Reliability:
    """How reproducible a measured order of arms is (module docstring)."""

    halves: float  # Spearman of the even replicates' mean gaps against the odd replicates'
    full: float  # stepped up to all the replicates: 2 r / (1 + r)
    ceiling: float  # sqrt(max(full, 0)): the expected Spearman of a perfect predictor with the measured order
    arms: int


def split_half(gaps: Sequence[Sequence[float]]) -> Reliability | None:
    """`gaps`: per arm, its per-replicate gaps (replicate r of every arm trained under the same seed; a diverged
    replicate is infinite and ranks last). None with fewer than 2 replicates, 3 arms, or a constant half."""
    if len(gaps) < 3 or min(len(g) for g in gaps) < 2:
        return None
    even = [_mean_or_inf(g[0::2]) for g in gaps]
    odd = [_mean_or_inf(g[1::2]) for g in gaps]
    halves = spearman(even, odd)
    if halves is None:
        return None
    full = 2 * halves / (1 + halves) if halves > -1 else -1.0
    return Reliability(halves, full, math.sqrt(max(full, 0.0)), len(gaps))


def replicates_for(found: Reliability, replicates: int, ceiling: float) -> int | None:
    """How many replicates the Spearman-Brown prophecy says the measured order needs for a perfect predictor to
    expect `ceiling` against it (reliability `ceiling`**2): k = r*(1 - r) / (r (1 - r*)) times the replicates run.
    None when the halves do not agree at all (no number of replicates is predicted to help)."""
    wanted, have = ceiling**2, found.full
    if have <= 0 or wanted >= 1:
        return None
    if have >= wanted:
        return replicates
    return math.ceil(replicates * wanted * (1 - have) / (have * (1 - wanted)))


def _mean_or_inf(values: Sequence[float]) -> float:
    return statistics.fmean(values) if all(math.isfinite(v) for v in values) else math.inf
