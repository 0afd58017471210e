"""Training arms from the same state: same initial weights, same data order, same seed, the same number of steps;
the held-out loss and the step time of each.

    from fp8_policy.experiment import arms_from_recommendation, run_arms, experiment_body
    arms = arms_from_recommendation(policy)
    measured = run_arms(arms, model=make_model, loss=loss_fn, batches=train_batches, heldout=heldout_batches,
                        steps=100, seed=0)
    client.post_experiment(run_id, experiment_body(measured, name="seed 0", run_id=run_id, seed=0))

`model`: a factory returning a fresh model (called after `torch.manual_seed(seed)`, so every arm starts from the
same weights) or a checkpoint path (a state dict loaded into `model_factory()`); `loss(model, batch)` returns the
scalar loss; `batches()` a fresh iterator of training batches (called once per arm: the same order each time);
`heldout()` an iterable of held-out batches. The optimizer is `optimizer(params)` (AdamW lr 1e-3 by default), one
step per batch with gradient clipping at `clip` (0: none); `scheduler(optimizer)`, when given, returns a torch LR
scheduler stepped after every optimizer step (the run's own schedule: its LR decay settles the final loss).
`apply(model, arm, seed)` puts the arm's precisions on the model: by default `apply_emulated` (CPU: every linear
layer trains in emulated NVFP4 / MXFP8 / FP8 / BF16, `fp8_policy.collect.convert_to_emulated_training`, GEMM overrides
included). On a GPU with Transformer Engine, `te_apply(policy)` applies the arm through `apply_policy(...,
backend="te")` instead (unverified here: no GPU; run your loss under the recipe's `te.autocast`).
An arm whose loss becomes NaN or infinite keeps training to the end (its held-out loss is then NaN): a diverged arm
is a result.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fp8_policy.client.experiment.arms import Arm

Batch = Any


def apply_emulated(model: nn.Module, arm: Arm, seed: int) -> nn.Module:
    from fp8_policy.client.collect.emulated import convert_to_emulated_training

    convert_to_emulated_training(model, arm.precisions, default="bf16", seed=seed, bf16_gemms=arm.bf16_gemms)
    return model


def te_apply(policy: Mapping[str, Any]) -> Callable[[nn.Module, Arm, int], nn.Module]:
    """`apply` for TE models: the arm as a policy (its BF16 layers skipped, its rungs as the ladder, the
    recommendation's recipe outside) through `apply_policy(backend="te")`. Unverified: no GPU here."""

    def apply(model: nn.Module, arm: Arm, seed: int) -> nn.Module:
        from fp8_policy.client.apply import apply_policy

        arm_policy = {
            **policy,
            "fp8_skip_layers": [n for n, p in arm.precisions.items() if p == "bf16"],
            "gemm_overrides": [{"layer": n, "gemms": g, "reason": "experiment arm"} for n, g in arm.bf16_gemms.items()],
            "precision_ladder": {
                **(policy.get("precision_ladder") or {}),
                "layers": {n: {"precision": p, "evidence": [], "confidence": 1.0} for n, p in arm.precisions.items()},
            },
        }
        apply_policy(model, arm_policy, backend="te")
        return model

    return apply


def _fresh(model: Callable[[], nn.Module] | str | Path, factory: Callable[[], nn.Module] | None) -> nn.Module:
    if callable(model):
        return model()
    if factory is None:
        raise ValueError("a checkpoint needs model_factory= to build the model it is loaded into")
    built = factory()
    built.load_state_dict(torch.load(Path(model), map_location="cpu", weights_only=True))
    return built


def run_arms(
    arms: Sequence[Arm],
    *,
    model: Callable[[], nn.Module] | str | Path,
    loss: Callable[[nn.Module, Batch], torch.Tensor],
    batches: Callable[[], Iterator[Batch]],
    heldout: Callable[[], Iterable[Batch]],
    steps: int,
    seed: int = 0,
    model_factory: Callable[[], nn.Module] | None = None,
    optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] | None = None,
    scheduler: Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LRScheduler] | None = None,
    clip: float = 1.0,
    apply: Callable[[nn.Module, Arm, int], nn.Module] = apply_emulated,
    progress: Callable[[str], None] | None = None,
    step_hook: Callable[[], None] | None = None,
) -> list[dict[str, Any]]:
    """Train every arm (module docstring); one dict per arm: arm, steps, heldout_loss, step_time_s, train_loss.
    `step_hook()` runs after every optimizer step (a statistics collector's `step`)."""
    if steps < 1:
        raise ValueError("steps must be at least 1")
    make_optimizer = optimizer or (lambda params: torch.optim.AdamW(params, lr=1e-3, weight_decay=0.0))
    out = []
    for arm in arms:
        torch.manual_seed(seed)
        net = apply(_fresh(model, model_factory), arm, seed)
        opt = make_optimizer(net.parameters())
        schedule = scheduler(opt) if scheduler is not None else None
        stream = batches()
        losses: list[float] = []
        started = time.perf_counter()
        for _ in range(steps):
            value = loss(net, next(stream))
            value.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward untyped
            if clip:
                torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if schedule is not None:
                schedule.step()
            if step_hook is not None:
                step_hook()
            losses.append(float(value.detach()))
        seconds = time.perf_counter() - started
        with torch.no_grad():
            held = [float(loss(net, batch)) for batch in heldout()]
        heldout_loss = sum(held) / len(held) if held else math.nan
        tail = losses[-min(20, len(losses)) :]
        row = {
            "arm": arm,
            "steps": steps,
            "heldout_loss": heldout_loss,
            "step_time_s": seconds / steps,
            "train_loss": sum(tail) / len(tail),
        }
        out.append(row)
        if progress is not None:
            progress(f"{arm.name}: held-out {heldout_loss:.4f}, {seconds / steps:.3f} s/step")
    return out
