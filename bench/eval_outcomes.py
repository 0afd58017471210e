"""`make eval-outcomes [QUICK=1] [OUT=result.json]` / `python -m bench.eval_outcomes [--quick] [--out FILE]`: does the
recommendation beat the rules of thumb in measured loss, and does its predicted risk order the arms?

Cases and arms: bench/outcome_cases.py (3 model shapes x 2 seeds under emulated NVFP4 with planted and natural
problems, plus a planted FP8 case per seed; `--quick`: two tiny cases, under a minute on 2 cores). Every arm is
trained in `--replicates` replicates (3; `--quick` 2): the same initial weights, each replicate its own data order
and rounding stream (bench/outcome_stats.py says why). Printed: per case and arm the mean held-out gap to BF16
(nats) with its standard error, the GEMM cost (GEMM time over all-BF16's, from the cost model) and the predicted
risk (nats per step); per case whether the recommendation is at least as good as the best rule (the lowest mean gap)
in loss, paired over the replicates and within their noise, at no more cost (the recommendation re-solved for the
best rule's speedup; and the default recommendation); the Spearman rank correlation of predicted risk and mean
measured gap over all arms and cases (and its mean per case), beside the measurement's own reproducibility (the
Spearman of the even replicates' order against the odd ones', bench/outcome_stats.py `split_half`): the ceiling
that any predicted risk can expect to reach against these measurements.
`--out`: `{cases: [{name, arms: [{name, kind, heldout_gap, heldout_gaps, gap_se, gemm_cost, predicted_risk}, ...]}],
spearman, spearman_corrected, reliability: {halves, full, ceiling, arms, replicates_for_ceiling}, replicates, ...}` (`heldout_gap`: the mean over the replicates).
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
from bench.outcome_stats import Reliability, paired, replicates_for, spearman, split_half  # noqa: E402

REPLICATES = 3  # per arm; bench/outcome_stats.py says why
QUICK_REPLICATES = 2


def _gaps(arm: dict[str, Any]) -> list[float]:
    """An arm's per-replicate gaps (a diverged replicate: inf); a row without them is one replicate."""
    gaps = arm.get("heldout_gaps") or [arm["heldout_gap"]]
    return [math.inf if g is None else g for g in gaps]


def _pairs(arms: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for arm in arms:
        if arm["predicted_risk"] is None:
            continue
        xs.append(arm["predicted_risk"])
        ys.append(arm["heldout_gap"] if arm["heldout_gap"] is not None else math.inf)  # diverged: the worst
    return xs, ys


def reliability(arms: list[dict[str, Any]]) -> Reliability | None:
    """The measured order's own reproducibility over the arms the Spearman counts (bench/outcome_stats.py
    `split_half`): the ceiling any predicted risk can expect to reach against these measurements."""
    return split_half([_gaps(a) for a in arms if a["predicted_risk"] is not None])


CEILING_WANTED = 0.9  # a measured order a perfect predictor would reach 0.9 against leaves room for a 0.8 bar


def _reliability_dict(found: Reliability | None, replicates: int) -> dict[str, Any] | None:
    if found is None:
        return None
    return {
        "halves": found.halves,
        "full": found.full,
        "ceiling": found.ceiling,
        "arms": found.arms,
        "replicates_for_ceiling": {str(CEILING_WANTED): replicates_for(found, replicates, CEILING_WANTED)},
    }


def _replicates(arms: list[dict[str, Any]]) -> int:
    return min((len(_gaps(a)) for a in arms), default=1)


def resolved_pairs(arms: list[dict[str, Any]]) -> tuple[int, int]:
    """(pairs of arms whose measured gaps differ beyond the replicates' noise, how many of those the predicted risk
    orders the same way): where the measurement can tell two arms apart, does the risk tell them apart the same way?"""
    known = [a for a in arms if a["predicted_risk"] is not None]
    resolved = agreed = 0
    for i, a in enumerate(known):
        for b in known[i + 1 :]:
            worse, better = paired(_gaps(a), _gaps(b)), paired(_gaps(b), _gaps(a))
            if not (worse.better or better.better):
                continue
            resolved += 1
            agreed += (a["predicted_risk"] > b["predicted_risk"]) == (worse.mean > 0) and (
                a["predicted_risk"] != b["predicted_risk"]
            )
    return resolved, agreed


def judge(case: dict[str, Any]) -> dict[str, Any]:
    """Per case: the best rule (lowest mean gap), and whether each recommended arm is at least as good in loss
    (paired over the replicates, within the noise: bench/outcome_stats.py) at no more GEMM cost."""
    arms = case["arms"]
    rules = [a for a in arms if a["kind"] == "rule" and a["heldout_gap"] is not None]
    best = min(rules, key=lambda a: a["heldout_gap"]) if rules else None
    out: dict[str, Any] = {"best_rule": best["name"] if best else None}
    for arm in (a for a in arms if a["kind"] == "recommended"):
        if best is None or arm["gemm_cost"] is None:
            verdict = None
        else:
            diff = paired(_gaps(arm), _gaps(best))
            cost_ok = arm["gemm_cost"] <= best["gemm_cost"] + 1e-9
            cheaper = arm["gemm_cost"] < best["gemm_cost"] - 1e-9
            verdict = {
                "as_good_in_loss": diff.not_worse,
                "no_more_cost": cost_ok,
                "strictly_better": diff.not_worse and cost_ok and (diff.better or cheaper),
                "gap_difference": diff.mean,
                "noise_bound": diff.bound,
                "lower_mean_gap": diff.mean <= 0,
            }
        out[arm["name"]] = verdict
    xs, ys = _pairs(arms)
    out["spearman"] = spearman(xs, ys)
    out["reliability"] = _reliability_dict(reliability(arms), _replicates(arms))
    out["resolved_pairs"], out["resolved_pairs_ordered_by_risk"] = resolved_pairs(arms)
    return out


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    xs, ys = [], []
    for case in results:
        cx, cy = _pairs(case["arms"])
        xs += cx
        ys += cy
    per_case = [c["judgement"]["spearman"] for c in results if c["judgement"]["spearman"] is not None]
    every = [a for case in results for a in case["arms"]]
    rho, found = spearman(xs, ys), reliability(every)
    budget = [v for c in results for k, v in c["judgement"].items() if k.startswith("recommended@") and v]
    default = [c["judgement"].get("recommended") for c in results if c["judgement"].get("recommended")]
    return {
        "replicates": max((c.get("replicates", 1) for c in results), default=1),
        "spearman": rho,
        # Spearman's correction for attenuation: the measured rho over the ceiling (the predicted risk itself is
        # computed, not measured twice): an estimate of the rho against the true gaps, as rough as the split
        "spearman_corrected": rho / found.ceiling if rho is not None and found is not None and found.ceiling else None,
        "spearman_mean_per_case": sum(per_case) / len(per_case) if per_case else None,
        "reliability": _reliability_dict(found, _replicates(every)),
        "pairs": len(xs),
        "resolved_pairs": sum(c["judgement"].get("resolved_pairs", 0) for c in results),
        "resolved_pairs_ordered_by_risk": sum(c["judgement"].get("resolved_pairs_ordered_by_risk", 0) for c in results),
        "budget_matched": _tally(budget),
        "default_recommendation": _tally(default),
    }


def _tally(verdicts: list[dict[str, Any]]) -> dict[str, int]:
    return {
        "cases": len(verdicts),
        "as_good_at_no_more_cost": sum(v["as_good_in_loss"] and v["no_more_cost"] for v in verdicts),
        "strictly_better": sum(v["strictly_better"] for v in verdicts),
        # the raw reading, noise aside: a mean gap no larger than the best rule's, at no more cost
        "lower_mean_gap_at_no_more_cost": sum(v.get("lower_mean_gap", False) and v["no_more_cost"] for v in verdicts),
    }


def table(results: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    lines = [f"{'case':30} {'arm':28} {'kind':12} {'gap (nats)':>11} {'GEMM cost':>10} {'risk (nats/step)':>17}"]
    for case in results:
        for arm in case["arms"]:
            gap = "diverged" if arm["heldout_gap"] is None else f"{arm['heldout_gap']:+.4f}"
            gap += "" if arm.get("gap_se") is None else f" ±{arm['gap_se']:.4f}"
            cost = "-" if arm["gemm_cost"] is None else f"{arm['gemm_cost']:.3f}"
            risk = "-" if arm["predicted_risk"] is None else f"{arm['predicted_risk']:.4g}"
            name = arm["name"] + (f" (= {', '.join(arm['same_as'])})" if arm["same_as"] else "")
            lines.append(f"{case['name']:30} {name:28} {arm['kind']:12} {gap:>18} {cost:>10} {risk:>17}")
        j = case["judgement"]
        calls = ", ".join(
            f"{k}: {'as good at no more cost' if v['as_good_in_loss'] and v['no_more_cost'] else 'NOT as good at no more cost'}"
            + (" (strictly better)" if v["strictly_better"] else "")
            for k, v in j.items()
            if k.startswith("recommended") and v
        )
        rho = "-" if j["spearman"] is None else f"{j['spearman']:.2f}"
        lines.append(f"{'':30} best rule {j['best_rule']}; {calls}; Spearman {rho}; {_verdict(case['verification'])}")
    s = summary
    rho = "-" if s["spearman"] is None else f"{s['spearman']:.3f}"
    lines += [
        "",
        f"Spearman (predicted risk vs measured gap, all arms and cases, {s['pairs']} pairs): {rho}; "
        f"mean per case: {s['spearman_mean_per_case']}",
        _reliability_line(s["reliability"]),
        "Spearman corrected for the measurement's noise (rho / ceiling, Spearman's correction for attenuation): "
        + ("-" if s.get("spearman_corrected") is None else f"{s['spearman_corrected']:.3f}"),
        f"arm pairs the replicates tell apart (paired, beyond the noise): {s['resolved_pairs']}, ordered the same way "
        f"by predicted risk: {s['resolved_pairs_ordered_by_risk']}",
        f"budget-matched recommendation: as good at no more cost in {s['budget_matched']['as_good_at_no_more_cost']}"
        f"/{s['budget_matched']['cases']} cases, strictly better in {s['budget_matched']['strictly_better']}",
        f"default recommendation: as good at no more cost in {s['default_recommendation']['as_good_at_no_more_cost']}"
        f"/{s['default_recommendation']['cases']} cases, strictly better in {s['default_recommendation']['strictly_better']}",
        f"(as good = the mean paired gap difference to the best rule is within the one-sided 95 % noise bound over "
        f"{s['replicates']} replicate(s); a lower mean gap at no more cost, noise aside: budget-matched "
        f"{s['budget_matched']['lower_mean_gap_at_no_more_cost']}, default "
        f"{s['default_recommendation']['lower_mean_gap_at_no_more_cost']})",
    ]
    return "\n".join(lines)


def _verdict(verification: dict[str, Any]) -> str:
    """The service's verdict on the case's experiment (one per replicate in result files written before the
    service judged replicates together)."""
    if verification.get("per_replicate"):
        return "service verdict per replicate: " + ", ".join(verification["per_replicate"])
    bound = verification.get("noise_bound")
    noise = f" (over {verification.get('replicates', 1)} replicates, noise bound ±{bound:.4f})" if bound else ""
    return f"service verdict: {verification['status']}{noise}"


def _reliability_line(found: dict[str, Any] | None) -> str:
    if found is None:
        return "the measured order's reproducibility: - (needs 2+ replicates)"
    return (
        f"the measured order's reproducibility (Spearman of the even replicates' mean gaps against the odd ones', "
        f"{found['arms']} arms): {found['halves']:.3f}, {found['full']:.3f} at all the replicates (Spearman-Brown); "
        f"the most a perfect predictor can expect against it: {found['ceiling']:.3f}; replicates the "
        f"Spearman-Brown prophecy says a ceiling of {CEILING_WANTED} needs: "
        f"{found['replicates_for_ceiling'][str(CEILING_WANTED)] or 'none would do'}"
    )


def evaluate(
    quick: bool, only: list[str] | None = None, progress: bool = True, replicates: int | None = None
) -> dict[str, Any]:
    replicates = replicates if replicates is not None else (QUICK_REPLICATES if quick else REPLICATES)
    torch.set_num_threads(1)  # small tensors: intra-op threads cost more than they save
    chosen = [c for c in cases(quick) if not only or c.name in only]
    results = []
    started = time.perf_counter()
    with service() as (api, work):
        for case in chosen:
            t0 = time.perf_counter()
            say = (lambda text, name=case.name: print(f"  [{name}] {text}", file=sys.stderr)) if progress else None
            result = run_case(case, api, work, say, replicates)
            result["judgement"] = judge(result)
            result["seconds"] = round(time.perf_counter() - t0, 1)
            results.append(result)
            if progress:
                print(f"{case.name}: done in {result['seconds']} s", file=sys.stderr)
    summary = summarize(results)
    seconds = round(time.perf_counter() - started, 1)
    return {"quick": quick, "replicates": replicates, "seconds": seconds, "cases": results, **summary}


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number of replicates") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: at least 1 replicate")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two tiny cases (the test suite runs this)")
    parser.add_argument("--out", type=Path, help="write the result JSON here")
    parser.add_argument("--only", nargs="*", help="run only these case names")
    parser.add_argument(
        "--replicates",
        type=_at_least_one,
        help=f"train every arm this many times (data order, rounding; default {REPLICATES}, --quick {QUICK_REPLICATES})",
    )
    parser.add_argument("--merge", nargs="*", type=Path, help="combine the --out files of runs split with --only")
    args = parser.parse_args(argv)
    if args.merge:
        parts = [json.loads(path.read_text()) for path in args.merge]
        results = [{**case, "judgement": judge(case)} for part in parts for case in part["cases"]]
        result = {"quick": parts[0]["quick"], "seconds": sum(p["seconds"] for p in parts), "cases": results}
        result.update(summarize(results))
    else:
        result = evaluate(args.quick, args.only, replicates=args.replicates)
    print(table(result["cases"], result))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
