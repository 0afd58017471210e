"""The eval's console output: the per-case table, per-case details, fixture runs, the 6M-line run (its analysis and
its target re-solve) and the totals."""

from __future__ import annotations

import math
from collections.abc import Iterable

from bench.eval_cases import Report
from bench.eval_scoring import _ratio
from bench.eval_target import print_result


def _pct(value: float) -> str:
    return f"{100 * value:5.1f} %"


def _short(patterns: Iterable[str]) -> str:
    return ",".join(sorted(patterns)) or "-"


def print_report(report: Report) -> None:
    header = (
        f"{'case':<36} {'fam':<8} {'rk':>2}  {'found patterns':<30} {'miss':>4} {'extra':>5} "
        f"{'skip tp/fp/fn':>13} {'hlth':>4}  {'recipe':<9} {'cfg':>3}  {'parse':>5} {'anal':>5} {'rec':>5}"
    )
    print(header)
    print("-" * len(header))
    for c in report.cases:
        s = c.score
        recipe = "-" if s.recipe is None else s.recipe + {True: "", False: "!", None: ""}[s.recipe_ok]
        print(
            f"{c.name[:36]:<36} {c.family:<8} {c.ranks:>2}  {_short(s.found)[:30]:<30} {len(s.missed):>4} "
            f"{len(s.false_alarms):>5} {len(s.skip_tp):>4}/{len(s.skip_fp):>3}/{len(s.skip_fn):>3} "
            f"{len(s.healthy_skipped):>4}  {recipe:<9} {c.configs_accepted:>1}/{len(c.configs)}  "
            f"{c.parse_seconds:5.2f} {c.analysis_seconds:5.2f} {c.recommend_seconds:5.2f}"
        )
    print(
        "(miss = planted patterns not found, extra = found but not planted, skip = truth skip layers vs skipped +"
        " overridden + lifted off NVFP4, hlth = healthy layers skipped, recipe '!' = not an expected recipe, cfg = formats accepted)"
    )

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
        print(
            f"  {f.name}: {f.layers} layers, {f.ranks} rank(s); analysis {f.analysis_seconds:.2f} s; configs "
            f"accepted {f.configs_accepted}/{len(f.configs)}"
        )
        for finding in f.findings:
            print(
                f"    finding {finding['pattern']} [{finding['severity']}] ({finding['layers']} layer(s)): "
                f"{finding['summary']}"
            )
        print(
            f"    recommendation: skip {len(r['skip_layers'])} layer(s) {r['skip_layers'][:4]}"
            f"{' ...' if len(r['skip_layers']) > 4 else ''}; {len(r['gemm_overrides'])} GEMM override(s); "
            f"recipe {r['recipe']} (confidence {r['confidence']:.2f})"
        )
        for fmt, errors in f.configs.items():
            for error in errors[:3]:
                print(f"    {fmt} config: {error}")

    if report.big is not None:
        b = report.big
        print(
            f"\n6M-line run from stored data ({b['tree']}): {int(b['lines_read']):,} lines, {int(b['points']):,} "
            f"points, {b['series']} series; ingest parse {b['parse_seconds']:.2f} s + store "
            f"{b['store_seconds']:.2f} s"
        )
        print(
            f"  load_and_analyze   : {b['load_and_analyze_seconds']:.2f} s (runs: "
            f"{', '.join(f'{x:.2f}' for x in b['load_and_analyze_runs'])})"
        )
        print(
            f"  recommendation_for : {b['recommendation_for_seconds']:.2f} s (runs: "
            f"{', '.join(f'{x:.2f}' for x in b['recommendation_for_runs'])}; loads and analyses again)"
        )
        steps = b.get("steps_analysis_seconds")
        print(f"  bench/steps.py _analysis_seconds: {'n/a' if steps is None else f'{steps:.2f} s'}")
        print(
            f"  planted {', '.join(b['planted'])}; found {', '.join(b['patterns'])}"
            f"{'; MISSED ' + ', '.join(b['missed']) if b['missed'] else ''}; {b['skip_layers']} skips + "
            f"{b['gemm_overrides']} overrides cover {b['skip_covered']}/{b['skip_truth']} planted layers "
            f"({len(b['skip_extra'])} extra); recipe {b['recipe']}"
        )

    if report.big_target is not None:
        print_result(report.big_target, with_checks=False)  # its checks are the report's, printed below

    t = report.totals
    accepted, emitted = report.configs
    te_ok, te_all = report.te_yaml_configs
    analysis = [c.analysis_seconds for c in report.cases if not math.isnan(c.analysis_seconds)]
    print(
        f"\ntotals over {t.cases} labelled cases ({sum(c.ranks == 8 for c in report.cases)} with 8 ranks) + "
        f"{len(report.fixtures)} fixture runs, {report.seconds:.1f} s:"
    )
    print(
        f"  pattern precision {_pct(t.pattern_precision)}  recall {_pct(t.pattern_recall)}   "
        f"(tp {t.pattern_tp}, false alarms {t.pattern_fp}, missed {t.pattern_fn})"
    )
    print(
        f"  skip-list precision {_pct(t.skip_precision)}  recall {_pct(t.skip_recall)}   "
        f"(tp {t.skip_tp}, fp {t.skip_fp}, fn {t.skip_fn} layers)"
    )
    for group, g in report.totals_by_group().items():
        print(
            f"    {group} ({g.cases} cases): pattern precision {_pct(g.pattern_precision)} recall "
            f"{_pct(g.pattern_recall)}; skip precision {_pct(g.skip_precision)} recall {_pct(g.skip_recall)}; "
            f"healthy layers skipped {g.healthy_skipped}; recipe {g.recipe_ok}/{g.recipe_scored}"
        )
    print(f"  healthy layers skipped: {t.healthy_skipped}")
    print(f"  recipe decisions as expected: {t.recipe_ok}/{t.recipe_scored} scored cases")
    print(
        f"  configs accepted: {accepted}/{emitted} ({_pct(_ratio(accepted, emitted)).strip()}); te-yaml by "
        f"nvdlfw_inspect ConfigManager: {te_ok}/{te_all}"
    )
    if analysis:
        print(
            f"  analysis time per case: median {sorted(analysis)[len(analysis) // 2]:.3f} s, max {max(analysis):.3f} s"
        )
    for label, ok in report.checks().items():
        print(f"  [{'PASS' if ok else 'FAIL'}] {label}")
