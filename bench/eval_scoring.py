"""The eval's metric: one case scored against its truth (CaseScore, score) and micro-averaged totals (Totals)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class CaseScore:
    """One case scored against its truth (conventions in bench/scenarios.py)."""

    planted: frozenset[str]
    found: frozenset[str]
    truth_skips: frozenset[str]
    covered: frozenset[str]  # skipped + overridden (+ lifted off NVFP4) layers
    signal_layers: frozenset[str]
    recipe: str | None = None
    expected_recipe: frozenset[str] | None = None

    @property
    def missed(self) -> frozenset[str]:
        return self.planted - self.found

    @property
    def false_alarms(self) -> frozenset[str]:
        return self.found - self.planted

    @property
    def skip_tp(self) -> frozenset[str]:
        return self.truth_skips & self.covered

    @property
    def skip_fp(self) -> frozenset[str]:
        return self.covered - self.truth_skips

    @property
    def skip_fn(self) -> frozenset[str]:
        return self.truth_skips - self.covered

    @property
    def healthy_skipped(self) -> frozenset[str]:
        return self.covered - self.signal_layers

    @property
    def recipe_ok(self) -> bool | None:
        if self.expected_recipe is None or self.recipe is None:
            return None
        return self.recipe in self.expected_recipe


def pattern_names(found: Iterable[str]) -> frozenset[str]:
    """The found patterns as the planted vocabulary names them: `warning_band` (layers in the warning band that no
    pattern explains, named so that findings and gate agree) is what the vocabulary calls `healthy` when it is the
    only finding, and no pattern next to others."""
    found = frozenset(found)
    rest = found - {"warning_band"}
    return rest if rest or not found else frozenset({"healthy"})


def score(
    planted: Iterable[str],
    found: Iterable[str],
    truth_skips: Iterable[str],
    signal_layers: Iterable[str],
    skipped: Iterable[str],
    overridden: Iterable[str],
    *,
    recipe: str | None = None,
    expected_recipe: Iterable[str] | None = None,
) -> CaseScore:
    """Score one case: `skipped` and `overridden` together are the covered layers."""
    return CaseScore(
        frozenset(planted),
        pattern_names(found),
        frozenset(truth_skips),
        frozenset(skipped) | frozenset(overridden),
        frozenset(signal_layers),
        recipe,
        None if expected_recipe is None else frozenset(expected_recipe),
    )


def _ratio(num: int, den: int) -> float:
    """num/den, 1.0 when nothing was asked (den 0): no claims, no wrong claims."""
    return num / den if den else 1.0


@dataclass(frozen=True)
class Totals:
    cases: int
    pattern_tp: int
    pattern_fp: int
    pattern_fn: int
    skip_tp: int
    skip_fp: int
    skip_fn: int
    healthy_skipped: int
    recipe_scored: int
    recipe_ok: int

    @property
    def pattern_precision(self) -> float:
        return _ratio(self.pattern_tp, self.pattern_tp + self.pattern_fp)

    @property
    def pattern_recall(self) -> float:
        return _ratio(self.pattern_tp, self.pattern_tp + self.pattern_fn)

    @property
    def skip_precision(self) -> float:
        return _ratio(self.skip_tp, self.skip_tp + self.skip_fp)

    @property
    def skip_recall(self) -> float:
        return _ratio(self.skip_tp, self.skip_tp + self.skip_fn)

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "pattern_precision": self.pattern_precision,
            "pattern_recall": self.pattern_recall,
            "skip_precision": self.skip_precision,
            "skip_recall": self.skip_recall,
        }


def totals(scores: Iterable[CaseScore]) -> Totals:
    """Micro-averaged counts over cases."""
    scores = list(scores)
    recipe = [s.recipe_ok for s in scores if s.recipe_ok is not None]
    return Totals(
        cases=len(scores),
        pattern_tp=sum(len(s.planted & s.found) for s in scores),
        pattern_fp=sum(len(s.false_alarms) for s in scores),
        pattern_fn=sum(len(s.missed) for s in scores),
        skip_tp=sum(len(s.skip_tp) for s in scores),
        skip_fp=sum(len(s.skip_fp) for s in scores),
        skip_fn=sum(len(s.skip_fn) for s in scores),
        healthy_skipped=sum(len(s.healthy_skipped) for s in scores),
        recipe_scored=len(recipe),
        recipe_ok=sum(recipe),
    )
