"""TE verification kit (`make gpu-check`): what fp8-policy claims about Transformer Engine, checked on a CUDA GPU.

    python examples/gpu_check.py [--out DIR] [--steps N]

On a CUDA machine with Transformer Engine and nvdlfw_inspect installed (`pip install 'fp8-policy[te,server]'`):
1. collector: the CPU collector (`fp8_policy.collect.FP8StatsCollector`) against TE's own LogFp8TensorStats on the
   same tensors (two bias-free te.Linear fed the tensors of the TE H100 parity fixture, current scaling, 4 steps):
   every logged value equal as printed, mse to 2e-7 relative (float32 summation order differs on the GPU).
2. apply precision: `apply_policy(model, policy, backend="te")` on a TE GPT; one forward under the outer
   te.autocast captures every TE GEMM module's input and output; re-run outside FP8, each kept module must give a
   bit-identical output and every other one a different one (a per-layer `block` rung is re-run under its own
   recipe and must match it).
3. closed loop (examples/gpu_check_loop.py): TE training with LogFp8TensorStats -> the service -> policy ->
   apply_policy + the te-monitor config -> retraining -> compare, as a table.
4. sensitivity (examples/gpu_check_sensitivity.py): the project's TE debug feature LogQuantizationSensitivity loaded
   through `feature_dirs` writes the CPU formulas' values on the GPU.
5. te-recipe (examples/gpu_check_recipe.py): a decision with BF16 layers, FP8 current scaling, MXFP8 or FP8 block
   scaling where TE says it runs, and per-GEMM mixes (HybridQuantizer), rendered as `te-recipe`, imported and
   trained under TE's `CustomRecipe(qfactory=...)`: the loss is finite, the quantizers TE built are the planned
   format per (layer, GEMM), and BF16-fprop modules give outputs bit-identical to BF16, every other one not.
Without CUDA, TE or nvdlfw_inspect it says what is missing and exits 0 (nothing verified). Exit status 1 when a
check fails. TE calls follow NVIDIA/TransformerEngine 2.20 (pytorch/quantization.py `autocast`, pytorch/module/*.py,
debug/features/log_fp8_tensor_stats.py) and docs/debug/1_getting_started.rst for the debug API; step 5 cites its own.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, for `examples.*`
from examples.gpu_check_data import STATS_LOG, parity_tensors, read_log  # noqa: E402
from examples.gpu_check_te import (  # noqa: E402
    autocast,
    capture_calls,
    first,
    gemm_modules,
    parity_te_model,
    rerun,
    te_features_dir,
    tiny_te_gpt,
)

Row = tuple[str, bool, str]  # (check, passed, detail)
STATS = ["underflows%", "scale_inv_min", "scale_inv_max", "mse"]


def missing() -> str | None:
    """Why the kit cannot run here (None: it can)."""
    if not torch.cuda.is_available():
        return "no CUDA device"
    for module, hint in (
        ("transformer_engine.pytorch", "Transformer Engine"),
        ("nvdlfw_inspect.api", "nvdlfw_inspect"),
    ):
        try:
            __import__(module)
        except ImportError as exc:
            return f"{hint} is not importable ({exc})"
    return None


def _run_pair(model: torch.nn.Module, tensors: dict, device: str, recipe: Any, on_step: Any) -> None:
    for t in range(4):
        loss = torch.zeros((), device=device)
        with autocast(recipe is not None, recipe):
            for name in ("fc1", "fc2"):
                x0, _, g0 = tensors[name]
                x = (x0 * 4.0**t).to(device).requires_grad_(True)
                loss = loss + (getattr(model, name)(x).float() * (g0 * 0.5**t).to(device)).sum()
        loss.backward()
        on_step()


def check_collector(work: Path) -> list[Row]:
    import nvdlfw_inspect.api as debug_api
    from transformer_engine.common.recipe import Float8CurrentScaling, Format

    from fp8_policy.collect import FP8StatsCollector

    tensors = parity_tensors()
    config = work / "parity.yaml"
    config.write_text(
        "parity:\n  enabled: true\n  layers:\n    layer_name_regex_pattern: '.*'\n  transformer_engine:\n"
        "    LogFp8TensorStats:\n      enabled: true\n      tensors: [activation, gradient, weight]\n"
        f"      stats: [{', '.join(STATS)}]\n      freq: 1\n"
    )
    debug_api.initialize(config_file=str(config), feature_dirs=[te_features_dir()], log_dir=str(work / "te"))
    try:
        model = parity_te_model(tensors)
        _run_pair(model, tensors, "cuda", Float8CurrentScaling(fp8_format=Format.HYBRID), debug_api.step)
    finally:
        debug_api.end_debug()
    theirs = read_log(work / "te" / STATS_LOG)

    cpu = torch.nn.Module()
    for name, (_, w, _) in tensors.items():
        setattr(cpu, name, torch.nn.Linear(w.shape[1], w.shape[0], bias=False))
        with torch.no_grad():
            getattr(cpu, name).weight.copy_(w)
    with FP8StatsCollector(
        cpu, work / "cpu", tensors=("activation", "gradient", "weight"), recipe="current", stats=STATS
    ) as c:
        _run_pair(cpu, tensors, "cpu", None, c.step)
    ours = read_log(work / "cpu" / "rank_0" / STATS_LOG)

    bad = []
    for key, value in theirs.items():
        mine = ours.get(key)
        close = mine is not None and key[0].endswith("mse") and math.isclose(float(mine), float(value), rel_tol=2e-7)
        if mine != value and not close:
            bad.append(f"{key[0]}@{key[1]}: TE {value}, collector {mine}")
    detail = f"{len(theirs)} TE lines, {len(ours)} collector lines" + (f"; first mismatches: {bad[:3]}" if bad else "")
    return [("collector = TE LogFp8TensorStats", bool(theirs) and not bad and set(theirs) == set(ours), detail)]


def check_apply_precision() -> list[Row]:
    from fp8_policy import apply_policy, recipe_from_policy

    torch.manual_seed(0)
    model = tiny_te_gpt()
    policy = {
        "fp8_skip_layers": ["model.layers.2.self_attention.layernorm_qkv", "model.lm_head"],
        "gemm_overrides": [{"layer": "model.layers.1.layernorm_mlp.fc2", "gemms": ["wgrad"]}],
        "recipe": {"name": "current", "kwargs": {"fp8_format": "HYBRID"}},
        "precision_ladder": {"layers": {"model.layers.3.self_attention.proj": {"precision": "block"}}},
    }
    recipe = recipe_from_policy(policy)
    report = apply_policy(model, policy, backend="te", recipe=recipe)
    gemms = gemm_modules(model)
    tokens = torch.randint(0, 128, (8, 64), device="cuda")

    def forward() -> None:
        with torch.no_grad(), autocast(True, recipe):
            model(tokens)

    seen = capture_calls(gemms, forward)
    kept = set(report.wrapped)
    rows: list[Row] = []
    for fqn, module in gemms.items():
        args, kwargs, out = seen[fqn]
        again = rerun(module, seen[fqn])  # outside any outer autocast: BF16 unless wrapped in a rung
        original = module.__dict__.get("_fp8_policy_original_forward")  # the forward apply_policy wrapped
        with torch.no_grad():
            plain = first(original(*args, **kwargs)) if original is not None else again
        same = torch.equal(first(out), again)
        if fqn in kept:
            rows.append((f"kept {fqn}", same, "bit-identical to BF16" if same else "differs from BF16"))
        elif fqn in report.precision_wrapped:
            ok = same and not torch.equal(first(out), plain)
            detail = "own recipe reproduced, not BF16" if ok else "wrong precision"
            rows.append((f"{report.precision_wrapped[fqn]} rung {fqn}", ok, detail))
        else:
            detail = "differs from BF16 (quantized)" if not same else "identical to BF16: not quantized"
            rows.append((f"fp8 {fqn}", not same, detail))
    return rows


def print_table(rows: list[Row]) -> None:
    width = max(len(name) for name, _, _ in rows)
    for name, passed, detail in rows:
        print(f"{'PASS' if passed else 'FAIL'}  {name:<{width}}  {detail}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="keep the logs and the report here (default: a temporary folder)")
    parser.add_argument("--steps", type=int, default=300, help="training steps of each closed-loop run")
    args = parser.parse_args(argv)
    reason = missing()
    if reason:
        print(f"gpu-check: skipped, {reason}: nothing was verified (needs a CUDA GPU with 'fp8-policy[te]').")
        return 0
    with tempfile.TemporaryDirectory(prefix="fp8-gpu-check-") as tmp:
        work = args.out or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        from examples.gpu_check_loop import closed_loop

        print(f"gpu-check on {torch.cuda.get_device_name()} (torch {torch.__version__})")
        (work / "collector").mkdir(exist_ok=True)
        rows = check_collector(work / "collector")
        rows += check_apply_precision()
        rows += closed_loop(work / "loop", args.steps)
        from examples.gpu_check_sensitivity import check_sensitivity

        rows += check_sensitivity(work / "sensitivity")
        from examples.gpu_check_recipe import check_te_recipe

        rows += check_te_recipe(work / "te-recipe")
        print_table(rows)
    return 0 if all(passed for _, passed, _ in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
