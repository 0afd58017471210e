"""Records produced by analysis: evidence, findings and the per-layer table (the pattern vocabulary, `Pattern`, is
policy/vocabulary.py's, re-exported here).

`Analysis`, which also holds the intermediate signals and layout, lives in `result.py` (so this module imports
neither `signals` nor `layout`, and both may import it).

Belongs here: frozen/plain dataclasses and their `to_dict()` (JSON-ready, floats rounded for display only).
Must not be here: computation over series, thresholds logic, I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fp8_policy.policy.thresholds import Severity
from fp8_policy.policy.vocabulary import PATTERN_LABELS as PATTERN_LABELS  # re-exported
from fp8_policy.policy.vocabulary import Pattern as Pattern  # re-exported: defined there for the API's schemas

_PATTERN_ORDER = {pattern: i for i, pattern in enumerate(Pattern)}


def _num(value: float | None, digits: int = 4) -> float | None:
    """JSON-safe rounding: NaN/inf become None."""
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), digits)


@dataclass(frozen=True, slots=True)
class Evidence:
    """Numbers behind a finding for one (layer, tensor, stat[, recipe][, rank]) series.

    `window` is the analysed post-warm-up range, `level_window` the trailing window the level is taken from;
    `rank` None means the worst rank was used (per-layer levels aggregate ranks by max).
    """

    layer: str
    tensor: str
    stat: str
    recipe: str | None = None
    rank: int | None = None
    window: tuple[int, int] | None = None
    level_window: tuple[int, int] | None = None
    level: float | None = None
    max: float | None = None
    mean: float | None = None
    last: float | None = None
    slope_per_1k: float | None = None
    onset: int | None = None
    start_level: float | None = None  # median of the first third of the window
    end_level: float | None = None  # median of the last third of the window
    projected_value: float | None = None
    projected_iteration: int | None = None
    crossing_iteration: int | None = None  # where a projected trend reaches the critical band
    count: int | None = None  # events (scale jumps, outlier features, ...)
    ratio: float | None = None  # largest scale jump factor, outlier score, what-if ratio, ...
    reference: float | None = None  # what the value is compared to (peers' or other ranks' median)

    @property
    def metric(self) -> str:
        prefix = f"{self.recipe}_" if self.recipe else ""
        return f"{self.tensor} {prefix}{self.stat}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "layer": self.layer,
            "metric": self.metric,
            "tensor": self.tensor,
            "stat": self.stat,
            "recipe": self.recipe,
            "rank": self.rank,
            "window": list(self.window) if self.window else None,
            "level_window": list(self.level_window) if self.level_window else None,
        }
        for name in (
            "level",
            "max",
            "mean",
            "last",
            "slope_per_1k",
            "start_level",
            "end_level",
            "projected_value",
            "ratio",
            "reference",
        ):
            out[name] = _num(getattr(self, name))
        for name in ("onset", "projected_iteration", "crossing_iteration", "count"):
            out[name] = getattr(self, name)
        return out


@dataclass(frozen=True, slots=True)
class Finding:
    """One detected pattern: its severity, the exact layer names, numeric evidence and a one-sentence summary."""

    pattern: Pattern
    severity: Severity
    layers: tuple[str, ...]
    evidence: tuple[Evidence, ...]
    summary: str

    def sort_key(self) -> tuple[int, int]:
        return (-self.severity.rank, _PATTERN_ORDER[self.pattern])

    def to_dict(self) -> dict[str, Any]:
        return {**self.brief(), "evidence": [e.to_dict() for e in self.evidence]}

    def brief(self) -> dict[str, Any]:
        """The finding without its evidence (recommendation and compare responses)."""
        return {
            "pattern": self.pattern.value,
            "label": self.pattern.label,
            "severity": self.severity.value,
            "layers": list(self.layers),
            "summary": self.summary,
        }


@dataclass(frozen=True, slots=True)
class TensorUnderflow:
    """One tensor's underflows% in a layer (worst rank), over the post-warm-up window."""

    level: float
    max: float
    mean: float
    last: float
    severity: Severity


@dataclass(frozen=True, slots=True)
class SeriesVerdict:
    """The one assessment of one (layer, tensor, stat) series: every view (findings' coverage, the layer table,
    the heatmap's boxes, gate) reads its severity from here.

    `stat` is the canonical stat (recipe prefix of the training recipe dropped, `_columnwise` merged into the
    row-wise verdict); `assessed` False when the series was excluded (`reason`) and only its raw values speak.
    """

    tensor: str
    stat: str
    severity: Severity
    level: float | None
    assessed: bool
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "tensor": self.tensor,
            "stat": self.stat,
            "severity": self.severity.value,
            "level": _num(self.level),
            "assessed": self.assessed,
            "reason": self.reason,
        }


NOT_ASSESSED = "n/a"


@dataclass(frozen=True, slots=True)
class LayerAssessment:
    """One row of the per-layer table. `severity` is the worst of its series' verdicts (`series`); `verdict` is
    the same, or "n/a" when no series of the layer could be assessed or speaks (BF16, unobserved, ignored)."""

    name: str
    group: str
    index: int | None
    sublayer: str | None
    precision: str
    status: str  # fp8 (observed) | fp8_unobserved | bf16 | ignored
    severity: Severity
    worst_signal: str | None  # e.g. "gradient underflows%"
    worst_level: float | None
    underflows: dict[str, TensorUnderflow]  # by tensor: activation / gradient / weight
    patterns: tuple[str, ...]
    series: tuple[SeriesVerdict, ...] = ()

    @property
    def verdict(self) -> str:
        """The severity, or "n/a" when nothing of the layer was assessed and nothing unassessed reaches a band."""
        speaks = any(v.assessed or v.severity > Severity.OK for v in self.series)
        return self.severity.value if speaks else NOT_ASSESSED

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "group": self.group,
            "index": self.index,
            "sublayer": self.sublayer,
            "precision": self.precision,
            "status": self.status,
            "severity": self.severity.value,
            "verdict": self.verdict,
            "series": [v.to_dict() for v in self.series],
            "worst_signal": self.worst_signal,
            "worst_level": _num(self.worst_level),
            "patterns": list(self.patterns),
        }
        for tensor in ("gradient", "activation", "weight"):
            summary = self.underflows.get(tensor)
            for stat in ("max", "mean", "last"):
                out[f"{tensor}_underflow_{stat}"] = _num(getattr(summary, stat)) if summary else None
        return out
