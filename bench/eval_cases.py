"""The eval's runs: each case and fixture through parse, analysis, recommendation and config checks, into a Report."""

from __future__ import annotations

import math
import re
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.eval_big import BIG_ANALYSIS_TARGET_S
from bench.eval_configs import ConfigChecker
from bench.eval_ingest import parse_tree
from bench.eval_scoring import CaseScore, Totals, score, totals
from bench.eval_target import checks as target_checks
from fp8_policy.policy.analysis import Analysis, analyze
from fp8_policy.policy.recommend import Recommendation, recommend
from fp8_policy.policy.records import RunData
from fp8_policy.policy.render import FORMATS


@dataclass
class CaseResult:
    name: str
    family: str
    ranks: int
    description: str
    score: CaseScore
    configs: dict[str, list[str]]  # format -> errors
    parse_seconds: float
    analysis_seconds: float
    recommend_seconds: float
    findings: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None  # the pipeline itself failed

    @property
    def configs_accepted(self) -> int:
        return sum(1 for errors in self.configs.values() if not errors)

    def to_dict(self) -> dict[str, Any]:
        s = self.score
        return {
            "name": self.name,
            "family": self.family,
            "ranks": self.ranks,
            "description": self.description,
            "planted": sorted(s.planted),
            "found": sorted(s.found),
            "missed": sorted(s.missed),
            "false_alarms": sorted(s.false_alarms),
            "skip_truth": sorted(s.truth_skips),
            "covered": sorted(s.covered),
            "skip_fp": sorted(s.skip_fp),
            "skip_fn": sorted(s.skip_fn),
            "healthy_skipped": sorted(s.healthy_skipped),
            "recipe": s.recipe,
            "expected_recipe": sorted(s.expected_recipe) if s.expected_recipe is not None else None,
            "recipe_ok": s.recipe_ok,
            "configs": self.configs,
            "parse_seconds": self.parse_seconds,
            "analysis_seconds": self.analysis_seconds,
            "recommend_seconds": self.recommend_seconds,
            "findings": self.findings,
            "error": self.error,
        }


def _findings(analysis: Analysis) -> list[dict[str, Any]]:
    return [
        {"pattern": f.pattern.value, "severity": f.severity.value, "layers": len(f.layers), "summary": f.summary}
        for f in analysis.findings
    ]


def run_pipeline(data: RunData) -> tuple[Analysis, Recommendation, float, float]:
    start = time.perf_counter()
    analysis = analyze(data)
    analyzed = time.perf_counter()
    rec = recommend(data, analysis)
    return analysis, rec, analyzed - start, time.perf_counter() - analyzed


def evaluate_case(case: Any, workdir: Path, checker: ConfigChecker) -> CaseResult:
    """Write, parse, analyse, recommend, render and score one `bench.scenarios.EvalCase`."""
    from fp8_policy.policy.synthetic import write_run

    tree = workdir / re.sub(r"[^\w.+-]", "_", case.name)
    truth = case.truth
    try:
        write_run(case.run, tree)
        start = time.perf_counter()
        data = parse_tree(tree)
        parse_seconds = time.perf_counter() - start
        analysis, rec, t_an, t_rec = run_pipeline(data)
    except Exception as exc:  # report, do not crash the suite
        empty = score(
            truth.patterns, (), truth.skip_layers, case.signal_layers, (), (), expected_recipe=case.expected_recipe
        )
        return CaseResult(
            case.name,
            case.family,
            case.run.ranks,
            case.description,
            empty,
            {fmt: ["not rendered: pipeline failed"] for fmt in FORMATS},
            math.nan,
            math.nan,
            math.nan,
            error=f"{type(exc).__name__}: {exc}",
        )
    decision = rec.decision
    s = score(
        truth.patterns,
        analysis.patterns(),
        truth.skip_layers,
        case.signal_layers,
        (*decision.skip_layers, *(rec.ladder.lifted if rec.ladder is not None else ())),
        (o.layer for o in decision.gemm_overrides),
        recipe=decision.recipe.name,
        expected_recipe=case.expected_recipe,
    )
    return CaseResult(
        case.name,
        case.family,
        case.run.ranks,
        case.description,
        s,
        checker.check(decision),
        parse_seconds,
        t_an,
        t_rec,
        _findings(analysis),
    )


@dataclass
class FixtureResult:
    name: str
    path: str
    configs: dict[str, list[str]]
    analysis_seconds: float
    layers: int = 0
    ranks: int = 0
    findings: list[dict[str, Any]] = field(default_factory=list)
    recommendation: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def configs_accepted(self) -> int:
        return sum(1 for errors in self.configs.values() if not errors)


def evaluate_fixture(tree: Path, checker: ConfigChecker) -> FixtureResult:
    try:
        data = parse_tree(tree)
        analysis, rec, t_an, _ = run_pipeline(data)
    except Exception as exc:
        return FixtureResult(
            tree.name,
            str(tree),
            {fmt: ["not rendered: pipeline failed"] for fmt in FORMATS},
            math.nan,
            error=f"{type(exc).__name__}: {exc}",
        )
    d = rec.decision
    summary = {
        "skip_layers": list(d.skip_layers),
        "gemm_overrides": [{"layer": o.layer, "gemms": list(o.gemms)} for o in d.gemm_overrides],
        "recipe": d.recipe.name,
        "recipe_reason": d.recipe.reason,
        "confidence": rec.confidence,
    }
    return FixtureResult(
        tree.name,
        str(tree),
        checker.check(d),
        t_an,
        len(data.layers),
        len({s.rank for s in data.series}),
        _findings(analysis),
        summary,
    )


@dataclass
class Report:
    cases: list[CaseResult]
    fixtures: list[FixtureResult]
    big: dict[str, Any] | None = None
    big_target: dict[str, Any] | None = None  # bench/eval_target.py: ?target= re-solved on the 6M-line run
    seconds: float = 0.0

    @property
    def totals(self) -> Totals:
        return totals(c.score for c in self.cases)

    def totals_by_group(self) -> dict[str, Totals]:
        """Totals of the earlier (FP8) cases and of the TE 2.20 frontier cases (`frontier/...`) apart."""
        groups = {
            "earlier cases": [c.score for c in self.cases if not c.name.startswith("frontier/")],
            "frontier (NVFP4/MXFP8)": [c.score for c in self.cases if c.name.startswith("frontier/")],
        }
        return {name: totals(scores) for name, scores in groups.items() if scores}

    @property
    def configs(self) -> tuple[int, int]:
        """(accepted, emitted) over cases and fixtures, every format."""
        results = [*self.cases, *self.fixtures]
        return sum(r.configs_accepted for r in results), sum(len(r.configs) for r in results)

    @property
    def te_yaml_configs(self) -> tuple[int, int]:
        results = [*self.cases, *self.fixtures]
        return sum(1 for r in results if not r.configs.get("te-yaml", ["missing"])), len(results)

    def checks(self) -> dict[str, bool]:
        t = self.totals
        accepted, emitted = self.configs
        out = {
            "every planted pattern found (pattern recall = 1)": t.pattern_fn == 0
            and not any(c.error for c in self.cases),
            "no healthy layer skipped": t.healthy_skipped == 0,
            "100 % of emitted configs accepted": accepted == emitted and not any(f.error for f in self.fixtures),
        }
        if self.big is not None:
            out[f"6M-line run: load + analysis from stored data < {BIG_ANALYSIS_TARGET_S:g} s"] = bool(
                self.big.get("load_and_analyze_seconds", math.inf) < BIG_ANALYSIS_TARGET_S
            )
        if self.big_target is not None:
            out.update({f"6M-line run, target {label}": ok for label, ok in target_checks(self.big_target).items()})
        return out

    def to_dict(self) -> dict[str, Any]:
        accepted, emitted = self.configs
        return {
            "cases": [c.to_dict() for c in self.cases],
            "fixtures": [asdict(f) for f in self.fixtures],
            "totals": {**self.totals.to_dict(), "configs_accepted": accepted, "configs_emitted": emitted},
            "totals_by_group": {name: t.to_dict() for name, t in self.totals_by_group().items()},
            "big": self.big,
            "big_target": self.big_target,
            "checks": self.checks(),
            "passed": all(self.checks().values()),
            "seconds": self.seconds,
        }


def evaluate(cases: Iterable[Any], *, fixtures: Iterable[Path] = (), progress: bool = False) -> Report:
    start = time.perf_counter()
    results: list[CaseResult] = []
    fixture_results: list[FixtureResult] = []
    with tempfile.TemporaryDirectory(prefix="fp8-eval-") as tmp:
        work = Path(tmp)
        with ConfigChecker(work) as checker:
            for case in cases:
                if progress:
                    print(f"  {case.name} ...", end="\r", file=sys.stderr, flush=True)
                results.append(evaluate_case(case, work, checker))
            for tree in fixtures:
                fixture_results.append(evaluate_fixture(tree, checker))
    if progress:
        print(" " * 60, end="\r", file=sys.stderr, flush=True)
    return Report(results, fixture_results, seconds=time.perf_counter() - start)
