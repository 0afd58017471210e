"""Severity bands and every tunable number of analysis and recommendation, with validation of per-request overrides.

Belongs here: the `Severity` scale, the frozen `Thresholds` record and `Thresholds.from_overrides`.
Must not be here: signal extraction, pattern logic, I/O, web or database imports.

Underflow bands follow the bionemo-framework fp8_analysis heatmap and FAQ (https://github.com/NVIDIA/bionemo-framework): < 0.5 % ok, 0.5–2 % warning,
2–4 % critical, ≥ 4 % severe. A value exactly on a bound belongs to the higher band. NVFP4 training has its own
bands (`nvfp4_*`, derived in analysis/formats.py): NVFP4 loses several percent of healthy data by construction.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from enum import Enum
from typing import Any


class Severity(str, Enum):
    """How bad a signal, layer or finding is; compares by badness, not alphabetically."""

    OK = "ok"
    WARNING = "warning"
    CRITICAL = "critical"
    SEVERE = "severe"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank < other.rank

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank <= other.rank

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank > other.rank

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank >= other.rank


_SEVERITY_RANK = {Severity.OK: 0, Severity.WARNING: 1, Severity.CRITICAL: 2, Severity.SEVERE: 3}


def worst(severities: Any) -> Severity:
    """The worst of an iterable of severities; OK when empty."""
    return max(severities, default=Severity.OK, key=lambda s: s.rank)


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Every number that turns statistics into findings and decisions. All are settable per request.

    Percent values (`warning`, `critical`, `severe`, gaps and rises) are in percentage points of underflows%.
    """

    warning: float = 0.5  # underflows% at or above: warning band
    critical: float = 2.0  # at or above: critical band; a layer left in FP8 must stay below this
    severe: float = 4.0  # at or above: severe band
    warmup_fraction: float = 0.05  # first share of the run's iteration span ignored as warm-up
    window_fraction: float = 0.25  # trailing share of the post-warm-up span used for a series' level
    level_quantile: float = 0.95  # level = this quantile of the trailing window (1.0 = its max)
    min_points: int = 5  # fewer post-warm-up points than this: low confidence, no trend fit
    trend_horizon: float = 1.0  # project trends this many observed post-warm-up spans past the last point
    trend_fit_fraction: float = 0.5  # trailing share of the post-warm-up span the robust trend is fitted on
    trend_min_rise: float = 0.25  # a trend must rise at least this much over its fit window
    trend_min_t: float = 4.0  # ... and its slope must be this many standard errors above zero
    trend_max_candidates: int = 64  # robust fits per analysis at most (the most promising candidates)
    uniform_fraction: float = 0.4  # more than this share of FP8 layers failing: `uniform` (a recipe problem)
    uniform_min_layers: int = 4  # `uniform` needs at least this many observed FP8 layers
    edge_fraction: float = 0.25  # first/last share of body blocks that count as early/late
    boundary_ratio: float = 2.0  # a boundary layer's level must be this many times its peers' median
    scale_jump_factor: float = 8.0  # consecutive scale_inv points differing at least this much (3 binades)
    scale_jumps_critical: int = 3  # this many jumps in one series: critical instability
    print_resolution: float = 1e-4  # logged values have 4 decimals; below half of this prints as 0.0000
    overflow_pct: float = 0.0  # overflows% strictly above this is an `overflow` finding
    rank_outlier_min_ranks: int = 4  # rank outliers need at least this many ranks (LOF needs 2 neighbours + 1)
    rank_outlier_gap: float = 0.5  # an outlier rank differs from the other ranks' median by at least this
    rank_outlier_ratio: float = 2.0  # ... and by this factor (either way), so rank-to-rank noise is no outlier
    rank_outlier_score: float = 1.5  # LocalOutlierFactor score (LOF) at or above: outlier
    rank_outlier_max_features: int = 256  # (layer, tensor) series tested across ranks at most
    rank_outlier_min_share: float = 0.1  # a rank must be an outlier on this share of the assessed series (and >= 2)
    whatif_gain: float = 0.5  # a what-if recipe qualifies when its median underflow ratio is at most this
    nvfp4_warning: float = 10.0  # NVFP4 training: nvfp4_underflows% warning band (analysis/formats.py derivation)
    nvfp4_critical: float = 13.0  # NVFP4 training: critical band (the heaviest healthy tensor's emulated level)
    nvfp4_severe: float = 19.5  # NVFP4 training: severe band

    def band(self, value: float) -> Severity:
        """Severity band of an underflows% value (NaN counts as OK: no evidence)."""
        if not value >= self.warning:  # also catches NaN
            return Severity.OK
        if value < self.critical:
            return Severity.WARNING
        if value < self.severe:
            return Severity.CRITICAL
        return Severity.SEVERE

    @property
    def censor_below(self) -> float:
        """Values below this printed as 0.0000: they are "< 5e-5", not zero (nvdlfw_inspect prints values with 4 decimals)."""
        return self.print_resolution / 2.0

    @classmethod
    def from_overrides(cls, overrides: Mapping[str, Any] | None, base: Thresholds | None = None) -> Thresholds:
        """Defaults (or `base`) with `overrides` applied; ValueError naming the bad key on any invalid input."""
        base = base or cls()
        if not overrides:
            return base
        if not isinstance(overrides, Mapping):
            raise ValueError(f"thresholds must be an object of name -> number, got {type(overrides).__name__}")
        known = {f.name: f for f in fields(cls)}
        changes: dict[str, Any] = {}
        for key, value in overrides.items():
            if key not in known:
                raise ValueError(f"unknown threshold {key!r}; expected one of: {', '.join(sorted(known))}")
            changes[key] = _coerce(key, value, known[key].type)
        result = replace(base, **changes)
        result.validate()
        return result

    def validate(self) -> None:
        """Raise ValueError with a clear message when the values are inconsistent."""
        if not 0.0 <= self.warning < self.critical < self.severe:
            raise ValueError(
                "thresholds must satisfy 0 <= warning < critical < severe, got "
                f"warning={self.warning}, critical={self.critical}, severe={self.severe}"
            )
        if not 0.0 <= self.nvfp4_warning < self.nvfp4_critical < self.nvfp4_severe:
            raise ValueError(
                "thresholds must satisfy 0 <= nvfp4_warning < nvfp4_critical < nvfp4_severe, got "
                f"{self.nvfp4_warning}, {self.nvfp4_critical}, {self.nvfp4_severe}"
            )
        for names, low, high, low_open in _RANGES:
            for name in names.split():
                _check_range(name, getattr(self, name), low, high, low_open=low_open)
        for name in (
            "min_points",
            "trend_max_candidates",
            "uniform_min_layers",
            "scale_jumps_critical",
            "rank_outlier_max_features",
        ):
            if not 1 <= getattr(self, name) <= MAX_COUNT:
                raise ValueError(f"threshold {name!r} must be in [1, {MAX_COUNT}], got {getattr(self, name)}")
        if not 4 <= self.rank_outlier_min_ranks <= MAX_COUNT:
            raise ValueError(
                f"threshold 'rank_outlier_min_ranks' must be in [4, {MAX_COUNT}], got {self.rank_outlier_min_ranks}"
            )

    def to_dict(self) -> dict[str, float | int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _coerce(key: str, value: Any, annotation: Any) -> float | int:
    """Check one override's type: ints for int fields, finite numbers for float fields, never bools or strings."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"threshold {key!r} must be a number, got {type(value).__name__} {value!r}")
    if annotation in (int, "int"):
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(f"threshold {key!r} must be an integer, got {value!r}")
        return int(value)
    if not math.isfinite(value):
        raise ValueError(f"threshold {key!r} must be finite, got {value!r}")
    return float(value)


# Every threshold is bounded above too (a request sets any of them): counts at most MAX_COUNT, percentage points
# at most 100 (underflows% and overflows% lie in 0..100), other factors at most MAX_FACTOR.
MAX_COUNT = 1_000_000
MAX_FACTOR = 1e6
# (thresholds, low, high, whether low itself is out): each threshold named lies in [low, high], or (low, high]
_RANGES: tuple[tuple[str, float, float, bool], ...] = (
    ("warmup_fraction rank_outlier_min_share", 0.0, 1.0, False),
    ("window_fraction level_quantile trend_fit_fraction uniform_fraction edge_fraction whatif_gain", 0.0, 1.0, True),
    ("warning critical severe nvfp4_warning nvfp4_critical nvfp4_severe", 0.0, 100.0, False),
    ("trend_min_rise rank_outlier_gap overflow_pct", 0.0, 100.0, False),
    ("trend_horizon trend_min_t print_resolution", 0.0, MAX_FACTOR, False),
    ("scale_jump_factor boundary_ratio rank_outlier_score rank_outlier_ratio", 1.0, MAX_FACTOR, True),
)


def _check_range(name: str, value: float, low: float, high: float, *, low_open: bool) -> None:
    too_low = value <= low if low_open else value < low
    if too_low or value > high:
        bracket = "(" if low_open else "["
        raise ValueError(f"threshold {name!r} must be in {bracket}{low}, {high}], got {value}")
