"""The closed loop at the precision frontier, on CPU: NVFP4 training -> statistics -> service -> per-layer precision
ladder -> retraining with each layer at its recommended precision -> a table against BF16.

    python examples/closed_loop_nvfp4.py --out DIR [--quick] [--server URL]

1. The small GPT-style model of `tiny_gpt` trains with every linear layer in emulated NVFP4
   (`fp8_policy.collect.convert_to_emulated_training`: TE 2.20 `NVFP4BlockScaling` numerics, 16x16 weight tiles,
   stochastic rounding of gradients, RHT on the wgrad operands), while `FP8StatsCollector(recipe="nvfp4")` writes
   `nvfp4_underflows%` / `nvfp4_mse` as TE's `LogNvfp4TensorStats` does, plus `mxfp8_underflows%` as a what-if, to
   DIR/before/.
2. The logs go to the fp8-policy service (its app in this process on a throwaway SQLite database, or `--server`)
   with metadata naming the recipe and a Blackwell GPU (B200, where NVFP4 and MXFP8 exist); it answers with the
   recommendation, whose `precision_ladder` holds each layer's cheapest tolerated precision.
3. A fresh copy of the model trains again, each layer at its ladder precision (NVFP4, MXFP8, FP8 block/current or
   BF16, all emulated), on the same seed and data; a third run without quantization (float32 on CPU standing in
   for BF16) is the reference. Without a `precision_ladder` in the answer (an older service), the loop falls back
   to `fp8_skip_layers` (BF16) and NVFP4 for the rest, and says so.

The planted trouble: the last block multiplies every 16th channel of its normalised inputs by `--outlier-gain`
(LLM-style activation outliers), so each 16-element NVFP4 block of `linear_qkv`'s and `linear_fc1`'s inputs holds one
value far above the others, which flush to zero; MXFP8's 32-element blocks with FP8 elements hold them. No statistic
is forged: every number comes from the training tensors.

DIR/report.json: per layer the worst NVFP4 underflow and the ladder's precision and evidence, the three runs'
losses, layers per precision, the ladder's predicted cost, and a verdict. The same table is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

# the checkout, for `examples.*` (and fp8_policy when it is not installed)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from examples.local_service import in_process_service, upload  # noqa: E402
from examples.tiny_gpt import VOCAB, Setup, TinyGPT, Trained, corpus, curve, final, fresh_model, train  # noqa: E402
from fp8_policy import PolicyClient  # noqa: E402
from fp8_policy.collect import FP8StatsCollector, convert_to_emulated_training  # noqa: E402

FULL = Setup(steps=150, freq=10, logit_scale=1.0)
QUICK = Setup(steps=12, freq=4, eval_batches=2, logit_scale=1.0)
STATS = ["nvfp4_underflows%", "nvfp4_mse", "mxfp8_underflows%"]
PLANTED_SUBLAYERS = ("self_attention.linear_qkv", "mlp.linear_fc1")


def planted_model(setup: Setup, outlier_gain: float) -> TinyGPT:
    """The fresh model with the outlier channels in its last block."""
    model = fresh_model(setup)
    model.decoder.layers[-1].outlier_gain = outlier_gain
    return model


def planted_layers(setup: Setup) -> list[str]:
    return [f"model.decoder.layers.{setup.n_layers}.{sub}" for sub in PLANTED_SUBLAYERS]


def run_metadata(setup: Setup) -> dict[str, Any]:
    return {
        "recipe": "NVFP4BlockScaling",
        "gpu": "B200",
        "framework": "fp8_policy emulated NVFP4 on CPU (TE 2.20 numerics)",
        "hidden_size": setup.d_model,
        "ffn_hidden_size": 4 * setup.d_model,
        "num_layers": setup.n_layers,
        "seq_len": setup.seq,
        "vocab_size": VOCAB,
        "num_attention_heads": 4,
    }


def ladder_precisions(policy: dict[str, Any], layers: list[str]) -> tuple[dict[str, str], str]:
    """Each layer's precision from the recommendation, and where it came from."""
    ladder = policy.get("precision_ladder")
    if ladder:
        chosen = {name: row["precision"] for name, row in ladder["layers"].items() if name in layers}
        return {name: chosen.get(name, "nvfp4") for name in layers}, "precision_ladder"
    skipped = set(policy.get("fp8_skip_layers") or []) | {o["layer"] for o in policy.get("gemm_overrides") or []}
    return (
        {name: "bf16" if name in skipped else "nvfp4" for name in layers},
        "fp8_skip_layers (the service's answer has no precision_ladder): BF16 for those, NVFP4 for the rest",
    )


def worst_nvfp4_underflows(layers: list[dict[str, Any]]) -> dict[str, float | None]:
    """Per layer, the worst logged `nvfp4_underflows%` over tensors and iterations (as the service stored it)."""
    out: dict[str, float | None] = {}
    for layer in layers:
        values = [s["max"] for s in layer["stats"] if s["stat"] == "nvfp4_underflows%" and s["max"] is not None]
        out[layer["name"]] = max(values) if values else None
    return out


@contextlib.contextmanager
def service(server: str | None) -> Iterator[PolicyClient]:
    if server is None:
        with in_process_service() as api:
            yield api
    else:
        with PolicyClient(server) as api:
            yield api


def summary(run: Trained, reference: Trained) -> dict[str, Any]:
    return {
        "final_train_loss": round(final(run.losses), 4),
        "eval_loss": round(run.eval_loss, 4),
        "eval_gap_vs_bf16": round(run.eval_loss - reference.eval_loss, 4),
        "seconds": round(run.seconds, 1),
        "curve": curve(run.losses),
    }


def verdict(report: dict[str, Any]) -> dict[str, Any]:
    runs, planted = report["runs"], report["planted_layers"]
    lifted = [name for name, precision in report["precisions"].items() if precision != "nvfp4"]
    found = sorted(set(planted) & set(lifted))
    gap_before, gap_after = runs["nvfp4"]["eval_gap_vs_bf16"], runs["ladder"]["eval_gap_vs_bf16"]
    if gap_before <= 0.01:
        helped, why = False, f"all-NVFP4 was already within {gap_before:+.4f} nats of BF16: nothing to recover"
    elif gap_before - gap_after > max(0.01, 0.25 * gap_before):
        helped, why = True, f"the held-out gap to BF16 went from {gap_before:+.4f} to {gap_after:+.4f} nats"
    else:
        helped, why = False, f"the gap went from {gap_before:+.4f} to {gap_after:+.4f} nats: less than a quarter closed"
    return {
        "helped": helped,
        "why": why,
        "planted_layers_lifted": found,
        "planted_layers_missed": sorted(set(planted) - set(lifted)),
        "lifted_but_not_planted": sorted(set(lifted) - set(planted)),
    }


def run_loop(out: Path, setup: Setup, outlier_gain: float, server: str | None) -> dict[str, Any]:
    if (out / "before").exists():
        raise SystemExit(f"{out / 'before'} exists: pick an empty --out directory")
    out.mkdir(parents=True, exist_ok=True)
    data = corpus()
    model = planted_model(setup, outlier_gain)
    names = list(convert_to_emulated_training(model, default="nvfp4"))
    nvfp4 = train(
        model,
        setup,
        data,
        lambda m: FP8StatsCollector(m, out / "before", recipe="nvfp4", stats=STATS, freq=setup.freq).start(),
    )
    with service(server) as api:
        run = upload(api, out / "before", "frontier: all NVFP4", run_metadata(setup))
        policy = api.recommendation(run["id"])
        worst = worst_nvfp4_underflows(api.layers(run["id"]))
    precisions, source = ladder_precisions(policy, names)

    mixed = planted_model(setup, outlier_gain)
    convert_to_emulated_training(mixed, precisions)
    ladder_run = train(mixed, setup, data)
    reference = train(planted_model(setup, outlier_gain), setup, data)

    ladder = policy.get("precision_ladder") or {}
    rows = ladder.get("layers", {})
    report: dict[str, Any] = {
        "setup": setup.__dict__ | {"outlier_gain": outlier_gain, "corpus": "pydoc_data.topics (CPython), ASCII"},
        "planted_layers": planted_layers(setup),
        "precision_source": source,
        "precisions": precisions,
        "layers": {
            name: {
                "precision": precisions[name],
                "worst_nvfp4_underflows%": worst.get(name),
                "evidence": rows.get(name, {}).get("evidence"),
                "confidence": rows.get(name, {}).get("confidence"),
            }
            for name in names
        },
        "layers_per_precision": dict(Counter(precisions.values())),
        "predicted_cost": ladder.get("expected_cost"),
        "ladder_assumptions": ladder.get("assumptions"),
        "recommendation": {k: policy.get(k) for k in ("fp8_skip_layers", "gemm_overrides", "recipe", "findings")},
        "runs": {
            "nvfp4": summary(nvfp4, reference),
            "ladder": summary(ladder_run, reference),
            "bf16": summary(reference, reference),
        },
        "reference_dtype": "float32 (CPU; stands in for BF16)",
        "service_run": {"id": run["id"], "lines_read": run["lines_read"], "lines_skipped": run["lines_skipped"]},
    }
    report["verdict"] = verdict(report)
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    return report


def table(report: dict[str, Any]) -> str:
    lines = [f"{'layer':48} {'worst nvfp4_underflows%':>24} {'ladder precision':>17}"]
    for name, row in report["layers"].items():
        worst = row["worst_nvfp4_underflows%"]
        mark = " (planted)" if name in report["planted_layers"] else ""
        shown = "-" if worst is None else f"{worst:.2f}"
        lines.append(f"{name:48} {shown:>24} {row['precision']:>17}{mark}")
    lines += ["", f"{'run':8} {'final train loss':>17} {'held-out loss':>14} {'vs BF16':>8} {'seconds':>8}"]
    for key, run in report["runs"].items():
        lines.append(
            f"{key:8} {run['final_train_loss']:17.4f} {run['eval_loss']:14.4f} "
            f"{run['eval_gap_vs_bf16']:+8.4f} {run['seconds']:8.1f}"
        )
    counts = ", ".join(f"{p}: {n}" for p, n in sorted(report["layers_per_precision"].items()))
    cost = report["predicted_cost"] or {}
    share = cost.get("gemm_share")
    lines += ["", f"layers per precision ({report['precision_source']}): {counts}"]
    lines.append(
        f"predicted cost: GEMM shares {share}, speedup vs all-BF16 {cost.get('gemm_speedup_vs_all_bf16')}, "
        f"GEMM time vs as logged {cost.get('gemm_time_vs_as_logged')} ({cost.get('method')})"
    )
    v = report["verdict"]
    lines.append(f"planted layers lifted: {v['planted_layers_lifted'] or 'none'}; missed: {v['planted_layers_missed']}")
    lines.append(f"verdict: {'helped' if v['helped'] else 'did not help'} - {v['why']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for before/ and report.json")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK.steps} steps instead of {FULL.steps}")
    parser.add_argument("--server", help="use this fp8-policy service instead of the in-process app")
    parser.add_argument("--steps", type=int, help="override the number of training steps")
    parser.add_argument("--outlier-gain", type=float, default=64.0, help="the planted outlier multiplier (1 = none)")
    args = parser.parse_args(argv)
    setup = QUICK if args.quick else FULL
    if args.steps is not None:
        setup = Setup(**{**setup.__dict__, "steps": args.steps})
    torch.set_num_threads(1)  # small tensors: intra-op threads cost more than they save (4x CPU on 2 shared cores)
    report = run_loop(args.out, setup, args.outlier_gain, args.server)
    print(table(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
