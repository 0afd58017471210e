"""`make eval` / `python -m bench.eval [--json OUT] [--only NAME ...] [--big]`: the labelled accuracy evaluation.

For every case of `bench.scenarios.SUITE`: write the synthetic log tree (policy.synthetic.write_run) into a temp
dir, parse it through the real ingest path (policy.log_files.classify_log_path + service.ingest.parse.parse_files),
build `RunData` from the `AssembledRun` (as service.analysis.actions.load_run_data does from the database),
`analyze`, `recommend`, render every format and check each artifact:
* te-yaml: loaded by nvdlfw_inspect's real `ConfigManager` (with a registry of TE's feature names, as in
  tests/policy/render); every layer of the run resolves to at most one section; skipped layers get
  DisableFP8Layer (DisableQuantizationLayer on TE >= 2.13), overridden layers DisableFP8GEMM with exactly their
  GEMMs, every other layer no Disable* feature;
* megatron: `bash -n` accepts the script, its precision-config heredoc is YAML whose matchers name known configs;
* hydra: every override line is one `key=value` token, `fp8_layers` a list of block numbers;
* torchao: the snippet runs, `module_filter_fn` keeps every SKIP_FQNS module out and converts the others.
Scoring conventions (covered layers, recipe-fix cases, "healthy layer skipped") are in bench/scenarios.py.
The two real bionemo fixture runs (no ground truth) go through the same path; their findings, recommendation and
config acceptance are reported. Targets (exit code 0 only when all hold): every planted pattern found, no healthy
layer skipped, 100 % of emitted configs accepted, and - when bench/out/esm2_6m exists (`make bench` makes it) or
--big asks for it - load + analysis of the stored 6M-line run < 2 s (ingested into a temp SQLite DB the way
bench/steps.py parse_store does, then service.analysis.actions.load_and_analyze and recommendation_for are timed).
Precision below 1 is reported, not fatal.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from policy.analysis import Analysis, analyze
from policy.assemble import AssembledRun
from policy.log_files import LogFile, classify_log_path
from policy.records import PolicyDecision, RunData, Series
from policy.recommend import Recommendation, recommend
from policy.render import FORMATS, render
from service.ingest.parse import parse_files

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT.parent / "shared" / "fixtures" / "bionemo"
FIXTURE_RUNS: tuple[str, ...] = ("dummy_logs_esm2", "dummy_logs_llama3")
BIG_TREE = ROOT / "bench" / "out" / "esm2_6m"
BIG_ANALYSIS_TARGET_S = 2.0
MAX_LINE_BYTES = 1 << 20

TE_FEATURES: tuple[str, ...] = (
    "LogTensorStats", "LogFp8TensorStats", "LogNvfp4TensorStats", "DisableFP8GEMM", "DisableFP8Layer",
    "DisableQuantizationGEMM", "DisableQuantizationLayer", "PerTensorScaling", "FakeQuant", "DumpTensors",
)
LAYER_DISABLE = frozenset({"DisableFP8Layer", "DisableQuantizationLayer"})
GEMM_DISABLE = frozenset({"DisableFP8GEMM", "DisableQuantizationGEMM"})


# ---------------------------------------------------------------------------------------------------- ingest
def log_files(tree: Path) -> list[tuple[LogFile, Path]]:
    """The nvdlfw_inspect logs of a tree, classified exactly as bench/steps.py and the upload path do."""
    return [(log, path) for path in sorted(tree.rglob("*.log"))
            if (log := classify_log_path(str(path.relative_to(tree))))]


def run_data(assembled: AssembledRun, metadata: dict[str, object] | None = None) -> RunData:
    """RunData straight from an AssembledRun: layers in model order, one Series per (rank, metric)."""
    layers = {layer.info.name: layer.info for layer in sorted(assembled.layers, key=lambda la: la.position)}
    series = [Series(s.rank, s.metric, s.iterations, s.values) for s in assembled.series]
    return RunData(layers=layers, series=series, metadata=dict(metadata or {}))


def parse_tree(tree: Path, threads: int = 1) -> RunData:
    files = log_files(tree)
    if not files:
        raise FileNotFoundError(f"no nvdlfw_inspect logs under {tree}")
    assembled, _counts = parse_files(files, max_line_bytes=MAX_LINE_BYTES, threads=threads)
    return run_data(assembled)


# ---------------------------------------------------------------------------------------------------- configs
class ConfigChecker:
    """Checks rendered artifacts; te-yaml through nvdlfw_inspect's real ConfigManager (use as a context manager)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._torch_linear: Any = None

    def __enter__(self) -> ConfigChecker:
        from nvdlfw_inspect import logging as nv_logging
        from nvdlfw_inspect.config_manager import ConfigManager
        from nvdlfw_inspect.registry import NamespaceData

        self._nv_logging, self._manager = nv_logging, ConfigManager
        self._previous_logger = nv_logging.LOGGER
        self._nv_logger = logging.getLogger("nvdlfw_inspect")
        self._previous_handlers = list(self._nv_logger.handlers)
        nv_logging.initialize_logger(str(self.workdir / "nvdlfw_logs"))
        self.registry = {
            "base": NamespaceData("base", None, features={"LogTensorStats": object()}),
            "transformer_engine": NamespaceData("transformer_engine", None,
                                                features={name: object() for name in TE_FEATURES}),
        }
        ConfigManager.reset()
        return self

    def __exit__(self, *exc: object) -> None:
        self._manager.reset()
        for handler in list(self._nv_logger.handlers):
            if handler not in self._previous_handlers:
                self._nv_logger.removeHandler(handler)
                handler.close()
        self._nv_logging.LOGGER = self._previous_logger

    # -- te-yaml
    def check_te_yaml(self, text: str, decision: PolicyDecision) -> list[str]:
        manager = self._manager
        path = self.workdir / "te_debug.yaml"
        path.write_text(text)
        manager.reset()
        try:
            manager._load_config(str(path), registry_data=self.registry)
        except Exception as exc:  # AssertionError for unknown features / missing fields, yaml errors, ...
            return [f"ConfigManager rejected the file: {type(exc).__name__}: {exc}"]
        errors: list[str] = []
        skip = set(decision.skip_layers)
        overrides = {o.layer: o for o in decision.gemm_overrides if o.layer not in skip}
        names = dict.fromkeys([*(layer.name for layer in decision.layers), *skip, *overrides])
        for name in names:
            try:
                config = manager.get_config_for_layer(name)
            except ValueError as exc:
                errors.append(f"{name}: {exc}")
                continue
            features = {**config.get("transformer_engine", {}), **config.get("base", {})}
            layer_off, gemm_off = LAYER_DISABLE & set(features), GEMM_DISABLE & set(features)
            if name in skip:
                if len(layer_off) != 1 or gemm_off:
                    errors.append(f"{name}: skipped but gets {sorted(features)}")
            elif name in overrides:
                want = set(overrides[name].gemms)
                got = set(features[next(iter(gemm_off))].get("gemms", ())) if len(gemm_off) == 1 else None
                if layer_off or got != want:
                    errors.append(f"{name}: override {sorted(want)} but gets {sorted(features)} gemms={got}")
            elif layer_off or gemm_off:
                errors.append(f"{name}: kept in FP8 but gets {sorted(layer_off | gemm_off)}")
        manager.reset()
        return errors

    # -- megatron
    def check_megatron(self, text: str, decision: PolicyDecision) -> list[str]:
        errors: list[str] = []
        result = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True, check=False)
        if result.returncode != 0:
            errors.append(f"bash -n: {result.stderr.strip()}")
        heredoc = re.search(r"<<'(\w+)'\n(.*?)\n\1$", text, re.S | re.M)
        if heredoc:
            try:
                config = yaml.safe_load(heredoc[2])
                configs, matchers = config["configs"], config["matchers"]
                unknown = [k for k, m in matchers.items() if m.get("config") not in configs or not m.get("pattern")]
                if unknown:
                    errors.append(f"precision config: matchers without a known config/pattern: {unknown}")
            except Exception as exc:
                errors.append(f"precision-config YAML: {type(exc).__name__}: {exc}")
        changed = bool(decision.skip_layers or decision.gemm_overrides)
        routed = heredoc is not None or "--first-last-layers-bf16" in text
        if changed and not routed:
            errors.append("layers are skipped/overridden but neither a precision config nor BF16 flags are emitted")
        if "FP8_POLICY_ARGS=(" not in text:
            errors.append("no FP8_POLICY_ARGS array")
        return errors

    # -- hydra
    @staticmethod
    def check_hydra(text: str, decision: PolicyDecision) -> list[str]:
        errors: list[str] = []
        for line in text.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                tokens = shlex.split(line)
            except ValueError as exc:
                errors.append(f"{line!r}: {exc}")
                continue
            if len(tokens) != 1 or not re.fullmatch(r"[+~]?[A-Za-z_][\w.]*=.*", tokens[0]):
                errors.append(f"not one key=value override: {line!r}")
                continue
            key, value = tokens[0].split("=", 1)
            if key == "fp8_layers":
                parsed = yaml.safe_load(value)
                if not isinstance(parsed, list) or not all(isinstance(v, int) and v >= 1 for v in parsed):
                    errors.append(f"fp8_layers is not a list of 1-based block numbers: {value!r}")
        return errors

    # -- torchao
    def check_torchao(self, text: str, decision: PolicyDecision) -> list[str]:
        try:
            namespace: dict[str, Any] = {"__name__": "torchao_fp8_filter"}
            exec(compile(text, "torchao_fp8_filter.py", "exec"), namespace)  # noqa: S102 - our own output
            skip_fqns, keep = namespace["SKIP_FQNS"], namespace["module_filter_fn"]
            if self._torch_linear is None:
                import torch

                self._torch_linear = torch.nn.Linear(2, 2)
        except Exception as exc:
            return [f"snippet does not run: {type(exc).__name__}: {exc}"]
        errors = [f"{fqn}: converted although listed" for fqn in skip_fqns if keep(self._torch_linear, fqn)]
        if not keep(self._torch_linear, "fp8_policy_eval.some.other.linear"):
            errors.append("an unlisted nn.Linear is not converted")
        covered = set(decision.skip_layers) | {o.layer for o in decision.gemm_overrides}
        if len(skip_fqns) != len(covered):
            errors.append(f"SKIP_FQNS has {len(skip_fqns)} entries for {len(covered)} skipped/overridden layers")
        return errors

    def check(self, decision: PolicyDecision) -> dict[str, list[str]]:
        """Errors per format (empty list: accepted); a renderer exception is an error of its format."""
        checks = {"te-yaml": self.check_te_yaml, "megatron": self.check_megatron, "hydra": self.check_hydra,
                  "torchao": self.check_torchao}
        out: dict[str, list[str]] = {}
        for fmt in FORMATS:
            try:
                text = render(decision, fmt).content
            except Exception as exc:
                out[fmt] = [f"render failed: {type(exc).__name__}: {exc}"]
                continue
            check = checks.get(fmt)
            out[fmt] = check(text, decision) if check else []
        return out


# ---------------------------------------------------------------------------------------------------- scoring
@dataclass(frozen=True)
class CaseScore:
    """One case scored against its truth (conventions in bench/scenarios.py)."""

    planted: frozenset[str]
    found: frozenset[str]
    truth_skips: frozenset[str]
    covered: frozenset[str]  # skipped + overridden layers
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


def score(planted: Iterable[str], found: Iterable[str], truth_skips: Iterable[str], signal_layers: Iterable[str],
          skipped: Iterable[str], overridden: Iterable[str], *, recipe: str | None = None,
          expected_recipe: Iterable[str] | None = None) -> CaseScore:
    """Score one case: `skipped` and `overridden` together are the covered layers."""
    return CaseScore(frozenset(planted), frozenset(found), frozenset(truth_skips), frozenset(skipped) |
                     frozenset(overridden), frozenset(signal_layers), recipe,
                     None if expected_recipe is None else frozenset(expected_recipe))


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
        return {**asdict(self), "pattern_precision": self.pattern_precision, "pattern_recall": self.pattern_recall,
                "skip_precision": self.skip_precision, "skip_recall": self.skip_recall}


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


# ---------------------------------------------------------------------------------------------------- evaluation
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
            "name": self.name, "family": self.family, "ranks": self.ranks, "description": self.description,
            "planted": sorted(s.planted), "found": sorted(s.found), "missed": sorted(s.missed),
            "false_alarms": sorted(s.false_alarms), "skip_truth": sorted(s.truth_skips),
            "covered": sorted(s.covered), "skip_fp": sorted(s.skip_fp), "skip_fn": sorted(s.skip_fn),
            "healthy_skipped": sorted(s.healthy_skipped), "recipe": s.recipe,
            "expected_recipe": sorted(s.expected_recipe) if s.expected_recipe is not None else None,
            "recipe_ok": s.recipe_ok, "configs": self.configs, "parse_seconds": self.parse_seconds,
            "analysis_seconds": self.analysis_seconds, "recommend_seconds": self.recommend_seconds,
            "findings": self.findings, "error": self.error,
        }


def _findings(analysis: Analysis) -> list[dict[str, Any]]:
    return [{"pattern": f.pattern.value, "severity": f.severity.value, "layers": len(f.layers),
             "summary": f.summary} for f in analysis.findings]


def run_pipeline(data: RunData) -> tuple[Analysis, Recommendation, float, float]:
    start = time.perf_counter()
    analysis = analyze(data)
    analyzed = time.perf_counter()
    rec = recommend(data, analysis)
    return analysis, rec, analyzed - start, time.perf_counter() - analyzed


def evaluate_case(case: Any, workdir: Path, checker: ConfigChecker) -> CaseResult:
    """Write, parse, analyse, recommend, render and score one `bench.scenarios.EvalCase`."""
    from policy.synthetic import write_run

    tree = workdir / re.sub(r"[^\w.+-]", "_", case.name)
    truth = case.truth
    try:
        write_run(case.run, tree)
        start = time.perf_counter()
        data = parse_tree(tree)
        parse_seconds = time.perf_counter() - start
        analysis, rec, t_an, t_rec = run_pipeline(data)
    except Exception as exc:  # report, do not crash the suite
        empty = score(truth.patterns, (), truth.skip_layers, case.signal_layers, (), (),
                      expected_recipe=case.expected_recipe)
        return CaseResult(case.name, case.family, case.run.ranks, case.description, empty,
                          {fmt: ["not rendered: pipeline failed"] for fmt in FORMATS}, math.nan, math.nan, math.nan,
                          error=f"{type(exc).__name__}: {exc}")
    decision = rec.decision
    s = score(truth.patterns, analysis.patterns(), truth.skip_layers, case.signal_layers, decision.skip_layers,
              (o.layer for o in decision.gemm_overrides), recipe=decision.recipe.name,
              expected_recipe=case.expected_recipe)
    return CaseResult(case.name, case.family, case.run.ranks, case.description, s, checker.check(decision),
                      parse_seconds, t_an, t_rec, _findings(analysis))


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
        return FixtureResult(tree.name, str(tree), {fmt: ["not rendered: pipeline failed"] for fmt in FORMATS},
                             math.nan, error=f"{type(exc).__name__}: {exc}")
    d = rec.decision
    summary = {"skip_layers": list(d.skip_layers),
               "gemm_overrides": [{"layer": o.layer, "gemms": list(o.gemms)} for o in d.gemm_overrides],
               "recipe": d.recipe.name, "recipe_reason": d.recipe.reason, "confidence": rec.confidence}
    return FixtureResult(tree.name, str(tree), checker.check(d), t_an, len(data.layers),
                         len({s.rank for s in data.series}), _findings(analysis), summary)


@dataclass
class Report:
    cases: list[CaseResult]
    fixtures: list[FixtureResult]
    big: dict[str, Any] | None = None
    seconds: float = 0.0

    @property
    def totals(self) -> Totals:
        return totals(c.score for c in self.cases)

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
            "every planted pattern found (pattern recall = 1)": t.pattern_fn == 0 and not any(c.error for c in
                                                                                            self.cases),
            "no healthy layer skipped": t.healthy_skipped == 0,
            "100 % of emitted configs accepted": accepted == emitted and not any(f.error for f in self.fixtures),
        }
        if self.big is not None:
            out[f"6M-line run: load + analysis from stored data < {BIG_ANALYSIS_TARGET_S:g} s"] = bool(
                self.big.get("load_and_analyze_seconds", math.inf) < BIG_ANALYSIS_TARGET_S)
        return out

    def to_dict(self) -> dict[str, Any]:
        accepted, emitted = self.configs
        return {"cases": [c.to_dict() for c in self.cases],
                "fixtures": [asdict(f) for f in self.fixtures],
                "totals": {**self.totals.to_dict(), "configs_accepted": accepted, "configs_emitted": emitted},
                "big": self.big, "checks": self.checks(), "passed": all(self.checks().values()),
                "seconds": self.seconds}


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


# ---------------------------------------------------------------------------------------------------- 6M run
@contextmanager
def stored_run(tree: Path, url: str) -> Iterator[tuple[Any, int, dict[str, float]]]:
    """Ingest `tree` into the database at `url` the way bench/steps.py parse_store does; yields (factory, id, times)."""
    from db.migrate import upgrade
    from db.repositories import NewRun, RunRepository
    from db.session import create_db_engine, create_session_factory, session_scope
    from service.app import _warm_parser

    upgrade(url)
    engine = create_db_engine(url)
    factory = create_session_factory(engine)
    try:
        with session_scope(factory) as session:
            run_id = RunRepository(session).add(NewRun("eval-6m", "eval", (), {}, "0" * 64, None, 0, "")).id
        _warm_parser()
        start = time.perf_counter()
        assembled, counts = parse_files(log_files(tree), max_line_bytes=MAX_LINE_BYTES, threads=2)
        parsed = time.perf_counter()
        with session_scope(factory) as session:
            repo = RunRepository(session)
            repo.store_ingest(repo.get(run_id), assembled, counts)
        times = {"parse_seconds": parsed - start, "store_seconds": time.perf_counter() - parsed,
                 "points": float(assembled.points), "lines_read": float(counts.lines_read)}
        del assembled
        yield factory, run_id, times
    finally:
        engine.dispose()


def ensure_big_tree(tree: Path = BIG_TREE) -> Path:
    """The 6M-line tree of `make bench`; generated (as bench/run.py does) when missing."""
    if not (tree / ".complete").exists():
        print(f"generating the 6M-line log tree in {tree} (python -m bench.generate) ...", file=sys.stderr,
              flush=True)
        subprocess.run([sys.executable, "-m", "bench.generate", str(tree), "--lines-target", "6m"], cwd=ROOT,
                       check=True, stdout=subprocess.DEVNULL)
        (tree / ".complete").touch()
    return tree


def big_timings(tree: Path, repeats: int = 3, truth: Any = None) -> dict[str, Any]:
    """Times service.analysis.actions.load_and_analyze and recommendation_for on a stored run (the 6M-line one);
    `truth` (a PlantedTruth, default: what bench/generate.py planted in the 6M tree) is compared with the result."""
    from bench.steps import _analysis_seconds
    from db.session import session_scope
    from service.analysis.actions import load_and_analyze, recommendation_for

    out: dict[str, Any] = {"tree": str(tree)}
    with tempfile.TemporaryDirectory(prefix="fp8-eval-big-") as tmp:
        with stored_run(tree, f"sqlite:///{Path(tmp) / 'eval.db'}") as (factory, run_id, times):
            out.update(times)
            analysis_runs, recommend_runs = [], []
            for _ in range(repeats):
                start = time.perf_counter()
                with session_scope(factory) as session:
                    data, analysis = load_and_analyze(session, run_id)
                analysis_runs.append(time.perf_counter() - start)
                start = time.perf_counter()
                with session_scope(factory) as session:
                    rec = recommendation_for(session, run_id, None)
                recommend_runs.append(time.perf_counter() - start)
            out["steps_analysis_seconds"] = _analysis_seconds(factory, run_id)  # what `make bench` reports
    if truth is None:
        from bench.generate import benchmark_case

        truth = benchmark_case("6m").truth
    covered = set(rec.decision.skip_layers) | {o.layer for o in rec.decision.gemm_overrides}
    out.update({
        "planted": sorted(truth.patterns), "missed": sorted(truth.patterns - analysis.patterns()),
        "skip_truth": len(truth.skip_layers), "skip_covered": len(truth.skip_layers & covered),
        "skip_extra": sorted(covered - truth.skip_layers),
        "load_and_analyze_seconds": analysis_runs[0], "load_and_analyze_runs": analysis_runs,
        "recommendation_for_seconds": recommend_runs[0], "recommendation_for_runs": recommend_runs,
        "series": len(data.series), "layers": len(data.layers), "patterns": sorted(analysis.patterns()),
        "skip_layers": len(rec.decision.skip_layers), "gemm_overrides": len(rec.decision.gemm_overrides),
        "recipe": rec.decision.recipe.name,
    })
    return out


# ---------------------------------------------------------------------------------------------------- printing
def _pct(value: float) -> str:
    return f"{100 * value:5.1f} %"


def _short(patterns: Iterable[str]) -> str:
    return ",".join(sorted(patterns)) or "-"


def print_report(report: Report) -> None:
    header = (f"{'case':<36} {'fam':<8} {'rk':>2}  {'found patterns':<30} {'miss':>4} {'extra':>5} "
              f"{'skip tp/fp/fn':>13} {'hlth':>4}  {'recipe':<9} {'cfg':>3}  {'parse':>5} {'anal':>5} {'rec':>5}")
    print(header)
    print("-" * len(header))
    for c in report.cases:
        s = c.score
        recipe = "-" if s.recipe is None else s.recipe + {True: "", False: "!", None: ""}[s.recipe_ok]
        print(f"{c.name[:36]:<36} {c.family:<8} {c.ranks:>2}  {_short(s.found)[:30]:<30} {len(s.missed):>4} "
              f"{len(s.false_alarms):>5} {len(s.skip_tp):>4}/{len(s.skip_fp):>3}/{len(s.skip_fn):>3} "
              f"{len(s.healthy_skipped):>4}  {recipe:<9} {c.configs_accepted:>1}/{len(c.configs)}  "
              f"{c.parse_seconds:5.2f} {c.analysis_seconds:5.2f} {c.recommend_seconds:5.2f}")
    print("(miss = planted patterns not found, extra = found but not planted, skip = truth skip layers vs skipped +"
          " overridden, hlth = healthy layers skipped, recipe '!' = not an expected recipe, cfg = formats accepted)")

    problems = []
    for c in report.cases:
        s = c.score
        lines = []
        if c.error:
            lines.append(f"pipeline error: {c.error}")
        if s.missed:
            lines.append(f"missed patterns: {_short(s.missed)} (found {_short(s.found)})")
        if s.false_alarms:
            lines.append(f"false alarms: {_short(s.false_alarms)}")
        if s.healthy_skipped:
            lines.append(f"HEALTHY LAYERS SKIPPED: {sorted(s.healthy_skipped)}")
        if s.skip_fn:
            lines.append(f"truth layers left in FP8: {len(s.skip_fn)}: {sorted(s.skip_fn)[:6]}")
        if s.skip_fp - s.healthy_skipped:
            lines.append(f"extra skips of signal layers: {sorted(s.skip_fp - s.healthy_skipped)[:6]}")
        if s.recipe_ok is False:
            lines.append(f"recipe {s.recipe!r}, expected one of {sorted(s.expected_recipe or ())}")
        for fmt, errors in c.configs.items():
            for error in errors[:3]:
                lines.append(f"{fmt} config: {error}")
        if lines:
            problems.append((c.name, lines))
    if problems:
        print("\nper-case details:")
        for name, lines in problems:
            print(f"  {name}")
            for line in lines:
                print(f"    - {line}")

    if report.fixtures:
        print("\nreal fixture runs (no ground truth):")
    for f in report.fixtures:
        if f.error:
            print(f"  {f.name}: PIPELINE ERROR {f.error}")
            continue
        r = f.recommendation
        print(f"  {f.name}: {f.layers} layers, {f.ranks} rank(s); analysis {f.analysis_seconds:.2f} s; configs "
              f"accepted {f.configs_accepted}/{len(f.configs)}")
        for finding in f.findings:
            print(f"    finding {finding['pattern']} [{finding['severity']}] ({finding['layers']} layer(s)): "
                  f"{finding['summary']}")
        print(f"    recommendation: skip {len(r['skip_layers'])} layer(s) {r['skip_layers'][:4]}"
              f"{' ...' if len(r['skip_layers']) > 4 else ''}; {len(r['gemm_overrides'])} GEMM override(s); "
              f"recipe {r['recipe']} (confidence {r['confidence']:.2f})")
        for fmt, errors in f.configs.items():
            for error in errors[:3]:
                print(f"    {fmt} config: {error}")

    if report.big is not None:
        b = report.big
        print(f"\n6M-line run from stored data ({b['tree']}): {int(b['lines_read']):,} lines, {int(b['points']):,} "
              f"points, {b['series']} series; ingest parse {b['parse_seconds']:.2f} s + store "
              f"{b['store_seconds']:.2f} s")
        print(f"  load_and_analyze   : {b['load_and_analyze_seconds']:.2f} s (runs: "
              f"{', '.join(f'{x:.2f}' for x in b['load_and_analyze_runs'])})")
        print(f"  recommendation_for : {b['recommendation_for_seconds']:.2f} s (runs: "
              f"{', '.join(f'{x:.2f}' for x in b['recommendation_for_runs'])}; loads and analyses again)")
        steps = b.get("steps_analysis_seconds")
        print(f"  bench/steps.py _analysis_seconds: {'n/a' if steps is None else f'{steps:.2f} s'}")
        print(f"  planted {', '.join(b['planted'])}; found {', '.join(b['patterns'])}"
              f"{'; MISSED ' + ', '.join(b['missed']) if b['missed'] else ''}; {b['skip_layers']} skips + "
              f"{b['gemm_overrides']} overrides cover {b['skip_covered']}/{b['skip_truth']} planted layers "
              f"({len(b['skip_extra'])} extra); recipe {b['recipe']}")

    t = report.totals
    accepted, emitted = report.configs
    te_ok, te_all = report.te_yaml_configs
    analysis = [c.analysis_seconds for c in report.cases if not math.isnan(c.analysis_seconds)]
    print(f"\ntotals over {t.cases} labelled cases ({sum(c.ranks == 8 for c in report.cases)} with 8 ranks) + "
          f"{len(report.fixtures)} fixture runs, {report.seconds:.1f} s:")
    print(f"  pattern precision {_pct(t.pattern_precision)}  recall {_pct(t.pattern_recall)}   "
          f"(tp {t.pattern_tp}, false alarms {t.pattern_fp}, missed {t.pattern_fn})")
    print(f"  skip-list precision {_pct(t.skip_precision)}  recall {_pct(t.skip_recall)}   "
          f"(tp {t.skip_tp}, fp {t.skip_fp}, fn {t.skip_fn} layers)")
    print(f"  healthy layers skipped: {t.healthy_skipped}")
    print(f"  recipe decisions as expected: {t.recipe_ok}/{t.recipe_scored} scored cases")
    print(f"  configs accepted: {accepted}/{emitted} ({_pct(_ratio(accepted, emitted)).strip()}); te-yaml by "
          f"nvdlfw_inspect ConfigManager: {te_ok}/{te_all}")
    if analysis:
        print(f"  analysis time per case: median {sorted(analysis)[len(analysis) // 2]:.3f} s, max "
              f"{max(analysis):.3f} s")
    for label, ok in report.checks().items():
        print(f"  [{'PASS' if ok else 'FAIL'}] {label}")


# ---------------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.eval", description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the full report as JSON here")
    parser.add_argument("--only", nargs="+", metavar="CASE", help="evaluate only these cases (names or prefixes)")
    parser.add_argument("--no-fixtures", action="store_true", help="skip the two real bionemo fixture runs")
    big = parser.add_mutually_exclusive_group()
    big.add_argument("--big", action="store_true",
                     help=f"time analysis of the stored 6M-line run ({BIG_TREE.relative_to(ROOT)}), generating the "
                          "tree when missing (by default it is timed only when `make bench` already made it)")
    big.add_argument("--no-big", action="store_true", help="do not time the 6M-line run")
    args = parser.parse_args(argv)

    from bench.scenarios import SUITE

    cases = SUITE
    if args.only:
        cases = [c for c in SUITE if any(c.name == o or c.name.startswith(o) for o in args.only)]
        if not cases:
            parser.error(f"no case matches {args.only}")
    fixtures = [] if args.no_fixtures else [FIXTURES / name for name in FIXTURE_RUNS]
    missing = [p for p in fixtures if not p.is_dir()]
    for path in missing:
        print(f"note: fixture run {path} not found; skipped", file=sys.stderr)
    fixtures = [p for p in fixtures if p.is_dir()]

    report = evaluate(cases, fixtures=fixtures, progress=sys.stderr.isatty())
    if args.big or (not args.no_big and (BIG_TREE / ".complete").exists()):
        report.big = big_timings(ensure_big_tree())
    print_report(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report.to_dict(), indent=2, default=_json_default))
    return 0 if all(report.checks().values()) else 1


def _json_default(value: object) -> object:
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


if __name__ == "__main__":
    raise SystemExit(main())
