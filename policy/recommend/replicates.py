"""Paired statistics over replicates for experiment verdicts (recommend/verification.py): replicate r of every arm
trained under the same seed and data order, so an arm's gap to BF16 (and the recommended arm's difference to a
rule arm) is taken per replicate and its noise is the spread of those paired values.

`paired(values)`: the mean, its standard error (sample standard deviation / sqrt(R), None below two values) and
the one-sided 95 % Student-t bound t(0.95, R-1) * SE (0 with one value): a measured excess above a threshold is
beyond the noise only when it exceeds this bound (a one-sided paired t-test at 5 %, e.g. NIST/SEMATECH
e-Handbook of Statistical Methods, section 7.2.2). Pure: floats in, floats out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Paired:
    mean: float
    se: float | None  # None with one replicate
    bound: float  # t(CONFIDENCE, R-1) * se; 0.0 with one replicate
    replicates: int


def t_quantile(dof: int, confidence: float = CONFIDENCE) -> float:
    """The one-sided Student-t quantile t(confidence, dof)."""
    # Imported on first use: SciPy (installed with scikit-learn, the server extra) costs ~0.5 s to import, which a
    # single-replicate verdict need not pay.
    from scipy import stats  # type: ignore[import-untyped]  # SciPy ships no py.typed

    return float(stats.t.ppf(confidence, dof))


def paired(values: Sequence[float], confidence: float = CONFIDENCE) -> Paired:
    """Mean, standard error and one-sided bound of per-replicate values (module docstring); values finite."""
    if not values:
        raise ValueError("no replicate values")
    count = len(values)
    mean = math.fsum(values) / count
    if count < 2:
        return Paired(mean, None, 0.0, count)
    variance = math.fsum((v - mean) ** 2 for v in values) / (count - 1)
    se = math.sqrt(variance / count)
    return Paired(mean, se, t_quantile(count - 1, confidence) * se, count)
