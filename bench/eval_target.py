"""The eval's target re-solve on the 6M-line run: `GET .../recommendation?target=` timed from stored data.

`python -m bench.eval_target [--repeats N] [--json OUT]` alone; `make eval` runs it (bench/eval.py) when its tree
exists or with --big. The tree is the 6M-line benchmark (bench/generate.py preset "6m": 5,886,888 lines) plus
loss-sensitivity statistics for nvfp4, mxfp8, current, delayed and block every 100 iterations (148,740 lines,
6,035,628 in all; planted layers are the sensitive ones, policy/synthetic/sensitivity.py), ingested once into SQLite
(bench/eval_big.py `stored_run`) with metadata naming a B300, so NVFP4 is on the ladder. Then the function the
`?target=` route calls, service/analysis/target.py `cached`, with a session per call as the route has one:
* cold: the first target asked of the run, an empty cache: load + analysis + recommendation + re-solve;
* uncached: the same `repeats` times more, each with an empty cache (a service that has not answered this run yet);
* re-solve: each target `repeats` times, each time with a fresh cache holding only the recommendation without a
  target (as the service holds it after the first target asked), so the re-solve itself runs every time;
and all with the JSON body the route sends (actions.recommendation_answer through JSONResponse).
Checks: p50 <= 1 s for the uncached path and for every target's re-solve (issue 32); every answer meets its target,
changes layers and keeps the planted (sensitive) layers the most precise: none of them at a cheaper precision than
any healthy layer (nvfp4 < the FP8 rungs < bf16).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.eval_big import stored_run
from bench.generate import SENSITIVITY_FREQ, benchmark_case
from bench.trees import OUT, ROOT

TARGET_TREES = {preset: OUT / f"esm2_{preset}_sensitivity" for preset in ("6m", "small")}
SENSITIVITY = ("nvfp4", "mxfp8", "current", "delayed", "block")
METADATA = {"gpu": "B300"}
TARGETS = ("speedup:1.3", "speedup:1.6", "risk:0.01")
RESOLVE_TARGET_S = 1.0
RANK = {"nvfp4": 0, "mxfp8": 1, "block": 1, "current": 1, "delayed": 1, "bf16": 2}  # precision, cheapest first


def ensure_target_tree(preset: str = "6m") -> Path:
    """The benchmark tree of `preset` with sensitivity statistics (module docstring), generated when missing."""
    tree = TARGET_TREES[preset]
    if not (tree / ".complete").exists():
        print(f"generating the {preset} log tree with sensitivity in {tree} ...", file=sys.stderr, flush=True)
        options = ["--sensitivity", ",".join(SENSITIVITY), "--sensitivity-freq", str(SENSITIVITY_FREQ)]
        subprocess.run(
            [sys.executable, "-m", "bench.generate", str(tree), "--lines-target", preset, *options],
            cwd=ROOT,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        (tree / ".complete").touch()
    return tree


def _timed(call: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    value = call()
    return value, time.perf_counter() - start


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def target_timings(
    tree: Path, repeats: int = 10, targets: tuple[str, ...] = TARGETS, preset: str = "6m"
) -> dict[str, Any]:
    """The cold call and `repeats` re-solves per target on the stored run of `tree` (module docstring), with the
    answers checked against the planted truth of benchmark `preset`."""
    from starlette.responses import JSONResponse

    from fp8_policy.db.session import session_scope
    from fp8_policy.service.analysis import actions, target
    from fp8_policy.service.single_flight import SingleFlightCache

    planted = benchmark_case(preset).truth.skip_layers
    out: dict[str, Any] = {"tree": str(tree), "metadata": METADATA, "targets": {}}
    with (
        tempfile.TemporaryDirectory(prefix="fp8-eval-target-") as tmp,
        stored_run(tree, f"sqlite:///{Path(tmp) / 'eval.db'}", METADATA) as (factory, run_id, times),
    ):
        out.update(times)

        def answer(cache: SingleFlightCache[Any], budget: target.Target) -> Any:
            with session_scope(factory) as session:
                rec = target.cached(cache, session, run_id, {}, budget)
            return rec, bytes(JSONResponse(actions.recommendation_answer(run_id, rec)).body)

        first = target.parse(targets[0])
        cold_cache: SingleFlightCache[Any] = SingleFlightCache()
        _, out["cold_seconds"] = _timed(lambda: answer(cold_cache, first))
        uncached = [_timed(lambda: answer(SingleFlightCache(), first))[1] for _ in range(repeats)]
        out["uncached"] = {
            "target": first.text,
            "runs": uncached,
            "p50": _pct(uncached, 0.5),
            "p95": _pct(uncached, 0.95),
        }
        with session_scope(factory) as session:
            base_key = target.keys(session, run_id, {}, None)[0]
        base = cold_cache.get(base_key, lambda: None)
        out["base"] = _summary(base, planted)
        for text in targets:
            budget = target.parse(text)
            runs = []
            for _ in range(repeats):
                cache: SingleFlightCache[Any] = SingleFlightCache()
                cache.get(base_key, lambda: base)
                (rec, body), seconds = _timed(lambda: answer(cache, budget))  # noqa: B023  # called right here
                runs.append(seconds)
            out["targets"][text] = {
                "runs": runs,
                "p50": _pct(runs, 0.5),
                "p95": _pct(runs, 0.95),
                "body_bytes": len(body),
                **_summary(rec, planted),
            }
    return out


def _summary(rec: Any, planted: frozenset[str]) -> dict[str, Any]:
    """What the answer did, and whether the planted layers stay the most precise (module docstring)."""
    rungs = {r.layer: r.precision for r in rec.ladder.rungs}
    info = rec.target or {}
    hot = [RANK[p] for layer, p in rungs.items() if layer in planted]
    cool = [RANK[p] for layer, p in rungs.items() if layer not in planted]
    at = {p: sum(1 for layer, q in rungs.items() if q == p and layer in planted) for p in sorted(set(rungs.values()))}
    return {
        "met": info.get("met"),
        "speedup": info.get("speedup", rec.expected_cost.get("gemm_speedup_vs_all_bf16")),
        "predicted_risk": info.get("predicted_risk", rec.frontier.to_dict()["chosen"]["predicted_risk"]),
        "layers_changed": len(info.get("layers_changed", [])),
        "skip_layers": len(rec.decision.skip_layers),
        "planted_at": at,
        "healthy_at": {p: sum(1 for layer, q in rungs.items() if q == p and layer not in planted) for p in at},
        "planted_most_precise": bool(hot and cool) and min(hot) >= max(cool),
    }


def checks(result: dict[str, Any]) -> dict[str, bool]:
    u = result["uncached"]
    out = {f"uncached ({u['target']}): p50 {u['p50']:.3f} s <= {RESOLVE_TARGET_S:g} s": u["p50"] <= RESOLVE_TARGET_S}
    for text, t in result["targets"].items():
        out[f"{text}: re-solve p50 {t['p50']:.3f} s <= {RESOLVE_TARGET_S:g} s"] = t["p50"] <= RESOLVE_TARGET_S
        out[f"{text}: met, {t['layers_changed']} layer(s) changed, planted layers most precise"] = bool(
            t["met"] and t["layers_changed"] and t["planted_most_precise"]
        )
    return out


def print_result(result: dict[str, Any], *, with_checks: bool = True) -> None:
    print(
        f"\nThe benchmark run with sensitivity, target re-solve from stored data ({result['tree']}, metadata "
        f"{result['metadata']}): {int(result['lines_read']):,} lines ({int(result['lines_skipped'])} skipped), ingest parse {result['parse_seconds']:.2f} s "
        f"+ store {result['store_seconds']:.2f} s"
    )
    u = result["uncached"]
    print(
        f"  cold (first target: load + analysis + recommendation + re-solve + JSON): {result['cold_seconds']:.2f} s; "
        f"uncached again p50 {u['p50']:.3f} s p95 {u['p95']:.3f} s ({len(u['runs'])} runs)"
    )
    base = result["base"]
    print(
        f"  recommendation: speedup {base['speedup']}, risk {base['predicted_risk']}; planted {base['planted_at']}, "
        f"healthy {base['healthy_at']}"
    )
    for text, t in result["targets"].items():
        print(
            f"  {text:<12} re-solve + JSON p50 {t['p50']:.3f} s p95 {t['p95']:.3f} s ({len(t['runs'])} runs); "
            f"met {t['met']}, speedup {t['speedup']}, risk {t['predicted_risk']}, {t['layers_changed']} changed; "
            f"planted {t['planted_at']}, healthy {t['healthy_at']}"
        )
    for label, ok in checks(result).items() if with_checks else ():
        print(f"  [{'PASS' if ok else 'FAIL'}] {label}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.eval_target", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--lines-target", choices=sorted(TARGET_TREES), default="6m", help="small: a quick look")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    result = target_timings(ensure_target_tree(args.lines_target), args.repeats, preset=args.lines_target)
    print_result(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**result, "checks": checks(result)}, indent=2))
    return 0 if all(checks(result).values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
