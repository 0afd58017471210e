"""`Analysis`: everything `analyze()` found, with the intermediate signals and layout the recommender reuses.

Belongs here: the result record and its lookups / `to_dict()`. It sits above `findings`, `signals` and `layout`
(it imports all three, none of them imports it), so the analysis modules form no import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fp8_policy.policy.analysis.findings import Finding, LayerAssessment, Pattern
from fp8_policy.policy.analysis.formats import TrainingFormat
from fp8_policy.policy.analysis.layout import Layout
from fp8_policy.policy.analysis.signals import Signals
from fp8_policy.policy.parallel.caveat import layout_caveat
from fp8_policy.policy.parallel.info import ParallelInfo
from fp8_policy.policy.records import QUANTIZED_TENSORS, MetricName, RunData
from fp8_policy.policy.thresholds import Thresholds


def _parallel_json(info: ParallelInfo | None) -> dict[str, Any] | None:
    """The layout as stored, `exact` only when no caveat applies (local names colliding under virtual stages)."""
    if info is None:
        return None
    return {**info.to_json(), "exact": info.exact and layout_caveat(info) is None}


@dataclass(slots=True)
class Analysis:
    """Everything `analyze()` found; `signals` and `layout` keep the intermediate results for the recommender."""

    findings: list[Finding]
    layers: list[LayerAssessment]
    thresholds: Thresholds
    signals: Signals = field(repr=False)
    layout: Layout = field(repr=False)
    stats: dict[str, Any] = field(default_factory=dict)  # ranks, windows, warm-up, counts
    notes: list[str] = field(default_factory=list)  # caveats: rounding, non-finite values, missing stats
    # The thresholds as requested (`thresholds` holds the bands actually used: NVFP4's under NVFP4 training).
    requested: Thresholds | None = None
    training: TrainingFormat = field(default_factory=lambda: TrainingFormat(None, ""))  # the training recipe read
    parallel: ParallelInfo | None = None  # the job's parallel layout (None: a run stored without one)
    # the run as analysed (a parallel job's shards combined, disagreeing replicas left out: analysis/shards.py), for
    # the recommender's per-layer evidence; None: the run as given
    data: RunData | None = field(default=None, repr=False)

    @property
    def requested_thresholds(self) -> Thresholds:
        return self.requested if self.requested is not None else self.thresholds

    def patterns(self) -> set[str]:
        return {finding.pattern.value for finding in self.findings}

    def by_pattern(self, pattern: Pattern | str) -> list[Finding]:
        return [f for f in self.findings if f.pattern.value == Pattern(pattern).value]

    def layer(self, name: str) -> LayerAssessment:
        row = next((row for row in self.layers if row.name == name), None)
        if row is None:
            raise KeyError(name)
        return row

    def focus(self) -> dict[str, Any] | None:
        """The series of the worst finding, for views that open on it (the run page's heatmap): in the first
        finding (worst first) with evidence on a quantized tensor, its evidence with the highest level (the first
        one when none has a level); `stat` is the stat key as logged (the heatmap's `stat=`). None when no finding
        names a series."""
        for finding in self.findings:
            quantized = [ev for ev in finding.evidence if ev.tensor in QUANTIZED_TENSORS]
            if quantized:
                ev = max(quantized, key=lambda e: e.level if e.level is not None and e.level == e.level else -1.0)
                columnwise = ev.stat.endswith("_columnwise")
                base = ev.stat.removesuffix("_columnwise")
                metric = MetricName(ev.layer, ev.tensor, base, ev.recipe, columnwise)
                return {
                    "layer": ev.layer,
                    "tensor": ev.tensor,
                    "stat": self.signals.logged_stat_key(metric),
                    "severity": finding.severity.value,
                    "pattern": finding.pattern.value,
                }
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "focus": self.focus(),
            "findings": [f.to_dict() for f in self.findings],
            "layers": [row.to_dict() for row in self.layers],
            "thresholds": self.thresholds.to_dict(),
            "stats": dict(self.stats),
            "notes": list(self.notes),
            "training_recipe": self.training.to_dict(),
            "parallel": _parallel_json(self.parallel),
        }
