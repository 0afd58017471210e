"""`make eval` / `python -m bench.eval [--json OUT] [--only NAME ...] [--big]`: the labelled accuracy evaluation.

For every case of `bench.scenarios.SUITE`: write the synthetic log tree (policy.synthetic.write_run) into a temp
dir, parse it through the real ingest path (policy.parse.log_files.classify_log_path + service.ingest.parse.parse_files),
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
bench/steps.py parse_store does, then service.analysis.actions.load_and_analyze and recommendation_for are timed);
when bench/out/esm2_6m_sensitivity exists or --big asks for it, `?target=` re-solved on that run with loss-sensitivity
statistics: p50 <= 1 s per target, each answer right (bench/eval_target.py).
Precision below 1 is reported, not fatal.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

# Re-exported so `from bench.eval import ...` keeps working; each name lives in the module its section moved to.
from bench.eval_big import BIG_ANALYSIS_TARGET_S, BIG_TREE, ROOT, big_timings, ensure_big_tree, stored_run
from bench.eval_cases import (
    CaseResult,
    FixtureResult,
    Report,
    evaluate,
    evaluate_case,
    evaluate_fixture,
    run_pipeline,
)
from bench.eval_configs import GEMM_DISABLE, LAYER_DISABLE, ConfigChecker
from bench.eval_ingest import MAX_LINE_BYTES, log_files, parse_tree, run_data
from bench.eval_printing import print_report
from bench.eval_scoring import CaseScore, Totals, score, totals
from bench.eval_target import TARGET_TREES, ensure_target_tree, target_timings
from bench.te_config_manager import TE_FEATURES

__all__ = [
    "BIG_ANALYSIS_TARGET_S",
    "BIG_TREE",
    "FIXTURES",
    "FIXTURE_RUNS",
    "GEMM_DISABLE",
    "LAYER_DISABLE",
    "MAX_LINE_BYTES",
    "ROOT",
    "TE_FEATURES",
    "CaseResult",
    "CaseScore",
    "ConfigChecker",
    "FixtureResult",
    "Report",
    "Totals",
    "big_timings",
    "ensure_big_tree",
    "evaluate",
    "evaluate_case",
    "evaluate_fixture",
    "log_files",
    "main",
    "parse_tree",
    "print_report",
    "run_data",
    "run_pipeline",
    "score",
    "stored_run",
    "totals",
]

FIXTURES = ROOT.parent / "shared" / "fixtures" / "bionemo"
FIXTURE_RUNS: tuple[str, ...] = ("dummy_logs_esm2", "dummy_logs_llama3")


# ---------------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.eval", description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the full report as JSON here")
    parser.add_argument("--only", nargs="+", metavar="CASE", help="evaluate only these cases (names or prefixes)")
    parser.add_argument("--no-fixtures", action="store_true", help="skip the two real bionemo fixture runs")
    big = parser.add_mutually_exclusive_group()
    big.add_argument(
        "--big",
        action="store_true",
        help=f"time analysis of the stored 6M-line run ({BIG_TREE.relative_to(ROOT)}) and the target re-solve on it "
        f"with sensitivity ({TARGET_TREES['6m'].relative_to(ROOT)}), generating the trees when missing (by default "
        "each is timed only when its tree exists: `make bench` makes the first, `python -m bench.eval_target` both)",
    )
    big.add_argument("--no-big", action="store_true", help="do not time the 6M-line runs")
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
    if args.big or (not args.no_big and (TARGET_TREES["6m"] / ".complete").exists()):
        report.big_target = target_timings(ensure_target_tree())
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
