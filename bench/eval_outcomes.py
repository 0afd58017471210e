"""`make eval-outcomes [QUICK=1] [OUT=result.json]` / `python -m bench.eval_outcomes [--quick] [--out FILE]`: does the
recommendation beat the rules of thumb in measured loss, and does its predicted risk order the arms?

Cases and arms: bench/outcome_cases.py (3 model shapes x 2 seeds under emulated NVFP4 with planted and natural
problems, plus a planted FP8 case per seed; `--quick`: two tiny cases, a few minutes on 2 cores). Printed: per case
and arm the held-out gap to BF16 (nats), the GEMM cost (GEMM time over all-BF16's, from the cost model) and the
predicted risk (nats per step); per case whether the recommendation is at least as good as the best rule in loss
at no more cost (the recommendation re-solved for the best rule's speedup; and the default recommendation); the
Spearman rank correlation of predicted risk and measured gap over all arms and cases (and its mean per case).
`--out`: `{cases: [{name, arms: [{name, kind, heldout_gap, gemm_cost, predicted_risk}, ...]}], spearman, ...}`.
Nothing is tuned to the outcome: the rules, thresholds and arms are fixed before any case runs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.outcome_cases import cases, run_case, service  # noqa: E402


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rho with average ranks for ties; None with fewer than 3 pairs or a constant side."""
    if len(xs) < 3:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx, vy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return cov / math.sqrt(vx * vy) if vx > 0 and vy > 0 else None


def _pairs(arms: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for arm in arms:
        if arm["predicted_risk"] is None:
            continue
        xs.append(arm["predicted_risk"])
        ys.append(arm["heldout_gap"] if arm["heldout_gap"] is not None else math.inf)  # diverged: the worst
    return xs, ys


def judge(case: dict[str, Any]) -> dict[str, Any]:
    """Per case: the best rule (lowest gap), and whether each recommended arm is at least as good at no more cost."""
    arms = case["arms"]
    rules = [a for a in arms if a["kind"] == "rule" and a["heldout_gap"] is not None]
    best = min(rules, key=lambda a: a["heldout_gap"]) if rules else None
    out: dict[str, Any] = {"best_rule": best["name"] if best else None}
    for arm in (a for a in arms if a["kind"] == "recommended"):
        if best is None or arm["heldout_gap"] is None or arm["gemm_cost"] is None:
            verdict = None
        else:
            loss_ok = arm["heldout_gap"] <= best["heldout_gap"]
            cost_ok = arm["gemm_cost"] <= best["gemm_cost"] + 1e-9
            strictly = (
                loss_ok
                and cost_ok
                and (arm["heldout_gap"] < best["heldout_gap"] or arm["gemm_cost"] < best["gemm_cost"] - 1e-9)
            )
            verdict = {"as_good_in_loss": loss_ok, "no_more_cost": cost_ok, "strictly_better": strictly}
        out[arm["name"]] = verdict
    xs, ys = _pairs(arms)
    out["spearman"] = spearman(xs, ys)
    return out


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    xs, ys = [], []
    for case in results:
        cx, cy = _pairs(case["arms"])
        xs += cx
        ys += cy
    per_case = [c["judgement"]["spearman"] for c in results if c["judgement"]["spearman"] is not None]
    budget = [v for c in results for k, v in c["judgement"].items() if k.startswith("recommended@") and v]
    default = [c["judgement"].get("recommended") for c in results if c["judgement"].get("recommended")]
    return {
        "spearman": spearman(xs, ys),
        "spearman_mean_per_case": sum(per_case) / len(per_case) if per_case else None,
        "pairs": len(xs),
        "budget_matched": {
            "cases": len(budget),
            "as_good_at_no_more_cost": sum(v["as_good_in_loss"] and v["no_more_cost"] for v in budget),
            "strictly_better": sum(v["strictly_better"] for v in budget),
        },
        "default_recommendation": {
            "cases": len(default),
            "as_good_at_no_more_cost": sum(v["as_good_in_loss"] and v["no_more_cost"] for v in default),
            "strictly_better": sum(v["strictly_better"] for v in default),
        },
    }


def table(results: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    lines = [f"{'case':30} {'arm':28} {'kind':12} {'gap (nats)':>11} {'GEMM cost':>10} {'risk (nats/step)':>17}"]
    for case in results:
        for arm in case["arms"]:
            gap = "diverged" if arm["heldout_gap"] is None else f"{arm['heldout_gap']:+.4f}"
            cost = "-" if arm["gemm_cost"] is None else f"{arm['gemm_cost']:.3f}"
            risk = "-" if arm["predicted_risk"] is None else f"{arm['predicted_risk']:.4g}"
            name = arm["name"] + (f" (= {', '.join(arm['same_as'])})" if arm["same_as"] else "")
            lines.append(f"{case['name']:30} {name:28} {arm['kind']:12} {gap:>11} {cost:>10} {risk:>17}")
        j = case["judgement"]
        calls = ", ".join(
            f"{k}: {'as good at no more cost' if v['as_good_in_loss'] and v['no_more_cost'] else 'NOT as good at no more cost'}"
            + (" (strictly better)" if v["strictly_better"] else "")
            for k, v in j.items()
            if k.startswith("recommended") and v
        )
        rho = "-" if j["spearman"] is None else f"{j['spearman']:.2f}"
        lines.append(f"{'':30} best rule {j['best_rule']}; {calls}; Spearman {rho}; {case['verification']['status']}")
    s = summary
    rho = "-" if s["spearman"] is None else f"{s['spearman']:.3f}"
    lines += [
        "",
        f"Spearman (predicted risk vs measured gap, all arms and cases, {s['pairs']} pairs): {rho}; "
        f"mean per case: {s['spearman_mean_per_case']}",
        f"budget-matched recommendation: as good at no more cost in {s['budget_matched']['as_good_at_no_more_cost']}"
        f"/{s['budget_matched']['cases']} cases, strictly better in {s['budget_matched']['strictly_better']}",
        f"default recommendation: as good at no more cost in {s['default_recommendation']['as_good_at_no_more_cost']}"
        f"/{s['default_recommendation']['cases']} cases, strictly better in {s['default_recommendation']['strictly_better']}",
    ]
    return "\n".join(lines)


def evaluate(quick: bool, only: list[str] | None = None, progress: bool = True) -> dict[str, Any]:
    torch.set_num_threads(1)  # small tensors: intra-op threads cost more than they save
    chosen = [c for c in cases(quick) if not only or c.name in only]
    results = []
    started = time.perf_counter()
    with service() as (api, work):
        for case in chosen:
            t0 = time.perf_counter()
            say = (lambda text, name=case.name: print(f"  [{name}] {text}", file=sys.stderr)) if progress else None
            result = run_case(case, api, work, say)
            result["judgement"] = judge(result)
            result["seconds"] = round(time.perf_counter() - t0, 1)
            results.append(result)
            if progress:
                print(f"{case.name}: done in {result['seconds']} s", file=sys.stderr)
    summary = summarize(results)
    return {"quick": quick, "seconds": round(time.perf_counter() - started, 1), "cases": results, **summary}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two tiny cases (the test suite runs this)")
    parser.add_argument("--out", type=Path, help="write the result JSON here")
    parser.add_argument("--only", nargs="*", help="run only these case names")
    parser.add_argument("--merge", nargs="*", type=Path, help="combine the --out files of runs split with --only")
    args = parser.parse_args(argv)
    if args.merge:
        parts = [json.loads(path.read_text()) for path in args.merge]
        results = [case for part in parts for case in part["cases"]]
        result = {"quick": parts[0]["quick"], "seconds": sum(p["seconds"] for p in parts), "cases": results}
        result.update(summarize(results))
    else:
        result = evaluate(args.quick, args.only)
    print(table(result["cases"], result))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
