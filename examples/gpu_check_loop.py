"""The TE closed loop of the verification kit (examples/gpu_check.py, check 3); needs CUDA, TE and the server extra.

Belongs here: three short TE trainings of a character GPT on CPython's bundled documentation topics (nothing is
downloaded) and the rows they give. Must not be here: the other checks, the table printing.

1. before: FP8 (Float8CurrentScaling, HYBRID) with the debug API's LogFp8TensorStats on every layer; the output
   logits are multiplied by 32 (the planted cause: confident logits flush the head's gradient in E5M2).
2. The logs go to a throwaway in-process service; its recommendation is applied to a fresh model with
   `apply_policy(backend="te")`, watched with the service's `te-monitor` config (a real TE run of that config:
   kept layers on LogTensorStats only), and trained again (after); its logs are analysed too.
3. reference: BF16 without FP8 and without the debug API.
Rows: held-out losses (after must be nearer the BF16 reference than before), the layers kept, and that the after
run's logs carry no finding at or above the worst severity of the before run.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

Row = tuple[str, bool, str]
SEQ, BATCH, VOCAB, LOGIT_SCALE, FREQ = 128, 32, 128, 32.0, 10
SEVERITIES = ("ok", "warning", "critical", "severe")
WATCH_ALL = (
    "fp8_stats:\n  enabled: true\n  layers:\n    layer_name_regex_pattern: '.*'\n  transformer_engine:\n"
    "    LogFp8TensorStats:\n      enabled: true\n      tensors: [activation, gradient, weight]\n"
    f"      stats: [underflows%, scale_inv_min, scale_inv_max, mse]\n      freq: {FREQ}\n"
)


def _batches(tokens: torch.Tensor, seed: int) -> Any:
    generator = torch.Generator().manual_seed(seed)
    while True:
        starts = torch.randint(0, len(tokens) - SEQ - 1, (BATCH,), generator=generator)
        yield torch.stack([tokens[i : i + SEQ + 1] for i in starts.tolist()]).cuda()


def _train(steps: int, recipe: Any, config: Path | None, log_dir: Path | None, prepare: Any = None) -> dict:
    """Train a fresh model (seed 0); with `config` the debug API logs to `log_dir`. Held-out loss and ms/step."""
    import nvdlfw_inspect.api as debug_api

    from examples.gpu_check_te import autocast, te_features_dir, tiny_te_gpt
    from examples.tiny_gpt import corpus

    train_tokens, held_out = corpus()
    if config is not None:
        debug_api.initialize(config_file=str(config), feature_dirs=[te_features_dir()], log_dir=str(log_dir))
    try:
        torch.manual_seed(0)
        model = tiny_te_gpt(logit_scale=LOGIT_SCALE)
        if config is not None:
            debug_api.infer_and_assign_layer_names(model)
        extra = prepare(model) if prepare else None
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        data = _batches(train_tokens, seed=1)
        start = time.perf_counter()
        for _ in range(steps):
            xy = next(data)
            with autocast(recipe is not None, recipe):
                logits = model(xy[:, :-1])
            F.cross_entropy(logits.float().reshape(-1, VOCAB), xy[:, 1:].reshape(-1)).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if config is not None:
                debug_api.step()
        torch.cuda.synchronize()
        ms = (time.perf_counter() - start) * 1000 / steps
        losses, evaluation = [], _batches(held_out, seed=2)
        with torch.no_grad():
            for _ in range(8):
                xy = next(evaluation)
                with autocast(recipe is not None, recipe):
                    logits = model(xy[:, :-1])
                losses.append(F.cross_entropy(logits.float().reshape(-1, VOCAB), xy[:, 1:].reshape(-1)).item())
    finally:
        if config is not None:
            debug_api.end_debug()
    return {"loss": sum(losses) / len(losses), "ms_per_step": ms, "extra": extra}


def _worst(api: Any, run_id: int) -> str:
    findings = api.analysis(run_id)["findings"]
    return max((f["severity"] for f in findings if f["severity"] in SEVERITIES), key=SEVERITIES.index, default="ok")


def closed_loop(work: Path, steps: int) -> list[Row]:
    from transformer_engine.common.recipe import Float8CurrentScaling, Format

    from fp8_policy import apply_policy, recipe_from_policy

    try:
        from examples.local_service import in_process_service, upload
    except ImportError as exc:  # the server extra is not installed
        return [("closed loop", False, f"the service cannot start here: {exc} (pip install 'fp8-policy[server]')")]
    work.mkdir(parents=True, exist_ok=True)
    (work / "watch_all.yaml").write_text(WATCH_ALL)
    recipe = Float8CurrentScaling(fp8_format=Format.HYBRID)
    meta = {"gpu": torch.cuda.get_device_name(), "recipe": "Float8CurrentScaling", "te_version": _te_version()}
    before = _train(steps, recipe, work / "watch_all.yaml", work / "before")
    with in_process_service() as api:
        first = upload(api, work / "before", "te-before", meta)
        policy = api.recommendation(first["id"])
        api.monitor_config(first["id"], work / "te_monitor.yaml")
        outer = recipe_from_policy(policy)
        after = _train(
            steps,
            outer,
            work / "te_monitor.yaml",
            work / "after",
            prepare=lambda model: apply_policy(model, policy, backend="te", recipe=outer),
        )
        second = upload(api, work / "after", "te-after", {**meta, "recipe": policy["recipe"]["class"]})
        worst_before, worst_after = _worst(api, first["id"]), _worst(api, second["id"])
    reference = _train(steps, None, None, None)
    report = after["extra"]
    kept = len(report.wrapped) + len(report.precision_wrapped)
    gap_before, gap_after = before["loss"] - reference["loss"], after["loss"] - reference["loss"]
    return [
        (
            "closed loop: loss",
            gap_after < gap_before,
            f"held-out loss FP8 before {before['loss']:.3f} / apply_policy {after['loss']:.3f} / BF16 "
            f"{reference['loss']:.3f} ({steps} steps)",
        ),
        (
            "closed loop: policy",
            kept > 0,
            f"{len(policy['fp8_skip_layers'])} skip(s), {len(policy['gemm_overrides'])} GEMM override(s), recipe "
            f"{policy['recipe']['name']}; {kept} module(s) wrapped by apply_policy",
        ),
        (
            "closed loop: te-monitor run",
            SEVERITIES.index(worst_after) < max(SEVERITIES.index(worst_before), 1),
            f"worst finding before {worst_before}, after {worst_after}; ms/step FP8+stats {before['ms_per_step']:.1f},"
            f" policy+te-monitor {after['ms_per_step']:.1f}, BF16 {reference['ms_per_step']:.1f}",
        ),
    ]


def _te_version() -> str:
    import transformer_engine

    return str(getattr(transformer_engine, "__version__", "unknown"))
