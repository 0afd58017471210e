"""The closed loop on CPU: FP8 training with statistics -> service -> policy -> FP8 retraining -> compare.

    python examples/closed_loop.py --out DIR [--quick] [--server URL]

1. A small GPT-style character model (Megatron-like layer names) trains with torchao float8 emulation
   (`Float8LinearConfig(emulate=True)`, tensorwise = current scaling) on the Python documentation topics
   that ship with CPython (`pydoc_data.topics`; nothing is downloaded), with `FP8StatsCollector` writing
   TE-format logs to DIR/before/.
2. The logs go to an fp8-policy service (started here on loopback with a temporary SQLite database, or
   `--server`), which analyses them and recommends a policy.
3. `apply_policy(fresh_model, policy, backend="torchao")` keeps the recommended layers in high precision;
   the same seed and data train it again with the collector on (DIR/after/), which is uploaded and compared.
4. A reference run without FP8 (fp32 on CPU, standing in for BF16) gives the loss to aim for.

The planted cause: the output layer multiplies its logits by `--logit-scale` (an output multiplier as in
muP-style parametrisations). Confident logits make most entries of the output layer's gradient
(softmax - one-hot, per token) tiny next to the largest, beyond what E5M2 with one scale per tensor can
hold; they flush to zero. No statistic is forged: every number comes from the training tensors.

DIR/report.json holds the per-layer worst underflows before/after, the loss curves and final losses of the
three runs, the recommendation and its predicted cost, the collector's measured overhead, and a verdict
that says whether the policy helped and why (or why not). The same table is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from pathlib import Path
from typing import Any

import torch
from torchao.float8 import Float8LinearConfig, convert_to_float8_training

# the checkout, for `examples.*` (and fp8_policy when it is not installed)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from examples.local_service import local_service, upload  # noqa: E402
from examples.tiny_gpt import Setup, Trained, corpus, curve, final, fresh_model, train  # noqa: E402
from fp8_policy import PolicyClient, apply_policy  # noqa: E402
from fp8_policy.collect import FP8StatsCollector  # noqa: E402

QUICK = Setup(steps=12, freq=3, eval_batches=2)
FP8_CONFIG = Float8LinearConfig(emulate=True)  # CPU: emulated float8 GEMMs, tensorwise (current) scaling


def worst_underflows(layers: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per layer: precision, and the worst `underflows%` over its tensors and logged iterations."""
    out = {}
    for layer in layers:
        values = {s["tensor"]: s["max"] for s in layer["stats"] if s["stat"] == "underflows%"}
        worst_tensor = max(values, key=lambda t: values[t]) if values else None
        out[layer["name"]] = {
            "precision": layer["precision"],
            "worst_underflows%": values.get(worst_tensor) if worst_tensor else None,
            "worst_tensor": worst_tensor,
        }
    return out


def run_metadata(setup: Setup) -> dict[str, Any]:
    """What the service uses for the recipe and the cost estimate (model dims instead of counting layers)."""
    return {
        "recipe": "Float8CurrentScaling",
        "framework": "torchao (emulated float8 on CPU)",
        "hidden_size": setup.d_model,
        "ffn_hidden_size": 4 * setup.d_model,
        "num_layers": setup.n_layers,
        "seq_len": setup.seq,
        "vocab_size": 128,
        "num_attention_heads": 4,
    }


def collecting(log_dir: Path, setup: Setup) -> Any:
    """The collector factory `train` starts on the model: TE-format statistics into `log_dir` every `freq` steps."""
    return lambda model: FP8StatsCollector(model, log_dir, freq=setup.freq).start()


# --- report ------------------------------------------------------------------------------------------------------


def verdict(before: Trained, after: Trained, reference: Trained, kept: list[str]) -> dict[str, Any]:
    """Did keeping the recommended layers in high precision bring the FP8 loss closer to the reference?"""
    gap_before, gap_after = before.eval_loss - reference.eval_loss, after.eval_loss - reference.eval_loss
    closed = gap_before - gap_after
    if not kept:
        helped, why = False, "the policy kept no layer in high precision, so the retrained model is the same"
    elif gap_before <= 0.01:
        helped, why = (
            False,
            (
                f"FP8 was already within {gap_before:+.4f} nats of the reference: the underflows the "
                "statistics show did not cost loss in this run, so there was nothing to recover"
            ),
        )
    elif closed > max(0.01, 0.25 * gap_before):
        helped, why = (
            True,
            (
                f"the held-out loss gap to the reference shrank from {gap_before:+.4f} to "
                f"{gap_after:+.4f} nats ({100 * closed / gap_before:.0f}% of it closed)"
            ),
        )
    else:
        helped, why = (
            False,
            (
                f"the gap went from {gap_before:+.4f} to {gap_after:+.4f} nats: less than a quarter of "
                "it closed, so the recommended layers were not where FP8 lost the loss"
            ),
        )
    return {
        "helped": helped,
        "why": why,
        "eval_gap_before": round(gap_before, 4),
        "eval_gap_after": round(gap_after, 4),
    }


def table(report: dict[str, Any]) -> str:
    lines = [f"{'layer':50} {'before: worst underflow%':>26} {'after':>22}"]
    after = report["layers_after"]
    for name, row in report["layers_before"].items():
        later = after.get(name, {})

        def cell(entry: dict[str, Any]) -> str:
            if entry.get("precision") != "fp8":
                return "high precision"
            value = entry.get("worst_underflows%")
            return "-" if value is None else f"{value:8.3f} ({entry['worst_tensor']})"

        lines.append(f"{name:50} {cell(row):>26} {cell(later):>22}")
    runs = report["runs"]
    lines.append("")
    lines.append(f"{'run':16} {'final train loss':>17} {'held-out loss':>14} {'seconds':>8}")
    for key in ("fp8_before", "fp8_after", "reference"):
        run = runs[key]
        lines.append(f"{key:16} {run['final_train_loss']:17.4f} {run['eval_loss']:14.4f} {run['seconds']:8.1f}")
    rec = report["recommendation"]
    lines.append("")
    overrides = [f"{o['layer']} ({'+'.join(o['gemms'])})" for o in rec.get("gemm_overrides") or []]
    cost = rec.get("expected_cost") or {}
    lines.append(
        f"recommended: skip {rec['fp8_skip_layers'] or 'none'}, BF16 GEMMs {overrides or 'none'}, "
        f"recipe {(rec.get('recipe') or {}).get('name')}; applied: {report['applied']['kept_high_precision']} "
        "in high precision"
    )
    lines.append(
        f"predicted cost: {cost.get('bf16_gemm_share')} of GEMM FLOPs in BF16, GEMM time "
        f"{cost.get('gemm_slowdown_vs_all_fp8_pct')}% above all-FP8 ({cost.get('method')})"
    )
    overhead = report["collector_overhead"]
    lines.append(
        f"collector: {overhead['ms_per_step']:.1f} ms per step = {overhead['percent_of_step']:.1f}% of a "
        f"{overhead['step_ms']:.1f} ms step (freq={overhead['freq']})"
    )
    lines.append(f"verdict: {'helped' if report['verdict']['helped'] else 'did not help'} - {report['verdict']['why']}")
    return "\n".join(lines)


def run_loop(out: Path, setup: Setup, server: str | None) -> dict[str, Any]:
    data = corpus()
    out.mkdir(parents=True, exist_ok=True)
    for sub in ("before", "after"):
        if (out / sub).exists():
            raise SystemExit(f"{out / sub} exists: pick an empty --out directory")

    model = fresh_model(setup)
    convert_to_float8_training(model, config=FP8_CONFIG)
    before = train(model, setup, data, collecting(out / "before", setup))

    service = contextlib.nullcontext(server) if server else local_service()
    with service as url, PolicyClient(url) as api:
        run_before = upload(api, out / "before", "closed-loop before", run_metadata(setup))
        policy = api.recommendation(run_before["id"])
        layers_before = worst_underflows(api.layers(run_before["id"]))

        model = fresh_model(setup)
        applied = apply_policy(model, policy, backend="torchao", config=FP8_CONFIG)
        after = train(model, setup, data, collecting(out / "after", setup))
        run_after = upload(api, out / "after", "closed-loop after", run_metadata(setup))
        layers_after = worst_underflows(api.layers(run_after["id"]))
        comparison = api.compare(run_before["id"], run_after["id"])

    reference = train(fresh_model(setup), setup, data)
    step_ms = 1000 * before.seconds / setup.steps
    collector_ms = before.collector_ms_per_step or 0.0
    report = {
        "setup": setup.__dict__
        | {"corpus": "pydoc_data.topics (CPython), ASCII", "fp8": "torchao emulate, tensorwise"},
        "layers_before": layers_before,
        "layers_after": layers_after,
        "runs": {
            name: {
                "final_train_loss": round(final(run.losses), 4),
                "eval_loss": round(run.eval_loss, 4),
                "seconds": round(run.seconds, 1),
                "curve": curve(run.losses),
            }
            for name, run in (("fp8_before", before), ("fp8_after", after), ("reference", reference))
        },
        "reference_dtype": "float32 (CPU; stands in for BF16)",
        "recommendation": {
            key: policy.get(key)
            for key in ("fp8_skip_layers", "gemm_overrides", "recipe", "expected_cost", "rationale", "confidence")
        },
        "applied": {"kept_high_precision": applied.kept, "converted": applied.converted},
        "service_runs": {
            "before": run_before["id"],
            "after": run_after["id"],
            "lines_read": [run_before["lines_read"], run_after["lines_read"]],
            "lines_skipped": [run_before["lines_skipped"], run_after["lines_skipped"]],
        },
        "compare_findings": {
            k: comparison.get(k) for k in ("findings_appeared", "findings_disappeared") if k in comparison
        },
        "collector_overhead": {
            "ms_per_step": round(collector_ms, 2),
            "step_ms": round(step_ms, 2),
            "percent_of_step": round(100 * collector_ms / step_ms, 2) if step_ms else math.nan,
            "freq": setup.freq,
            "after_run_ms_per_step": round(after.collector_ms_per_step or 0.0, 2),
        },
        "applied_as": (
            "torchao converts whole modules: a layer with a per-GEMM override (gemm_overrides) is kept "
            "entirely in high precision (apply_policy's gemm_overrides='whole_module')"
        ),
        "verdict": verdict(before, after, reference, applied.kept),
    }
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for before/, after/ and report.json")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK.steps} steps instead of {Setup.steps}")
    parser.add_argument("--server", help="use this fp8-policy service instead of starting one on loopback")
    parser.add_argument("--steps", type=int, help="override the number of training steps")
    parser.add_argument("--logit-scale", type=float, help="the planted output multiplier (1 = none)")
    args = parser.parse_args(argv)
    setup = QUICK if args.quick else Setup()
    overrides = {k: v for k, v in (("steps", args.steps), ("logit_scale", args.logit_scale)) if v is not None}
    setup = Setup(**{**setup.__dict__, **overrides})
    torch.set_num_threads(min(2, torch.get_num_threads()))
    report = run_loop(args.out, setup, args.server)
    print(table(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
