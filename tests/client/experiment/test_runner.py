"""`run_arms` (client/experiment/runner.py): every arm from the same state, and the run's own LR schedule stepped
after every optimizer step."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn

from fp8_policy.client.experiment.arms import Arm
from fp8_policy.client.experiment.runner import run_arms

STEPS = 6


def _model() -> nn.Module:
    torch.manual_seed(7)
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))


def _batches() -> Iterator[torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    while True:
        yield torch.randn(4, 8, generator=generator)


def _loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    return (model(batch) - batch.sum(dim=1, keepdim=True)).pow(2).mean()


def _plain(model: nn.Module, _arm: Arm, _seed: int) -> nn.Module:
    return model


def _run(**kwargs: object) -> list[dict[str, object]]:
    arms = [Arm("a", "bf16", {}), Arm("b", "bf16", {})]
    held = [torch.ones(2, 8)]
    return run_arms(
        arms, model=_model, loss=_loss, batches=_batches, heldout=lambda: held, steps=STEPS, apply=_plain, **kwargs
    )


def test_arms_with_the_same_assignment_from_the_same_state_measure_the_same() -> None:
    first, second = _run()
    assert first["heldout_loss"] == second["heldout_loss"] and first["train_loss"] == second["train_loss"]


def test_the_scheduler_is_built_per_arm_and_stepped_after_every_optimizer_step() -> None:
    seen: list[list[float]] = []

    def schedule(optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
        lrs: list[float] = []
        seen.append(lrs)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 - step / STEPS)
        original = scheduler.step

        def step(*args: object) -> None:
            lrs.append(optimizer.param_groups[0]["lr"])  # the LR the step just used
            original(*args)  # type: ignore[arg-type]

        scheduler.step = step  # type: ignore[method-assign]
        return scheduler

    decayed = _run(scheduler=schedule)
    assert [len(lrs) for lrs in seen] == [STEPS, STEPS]  # one scheduler per arm, one step per optimizer step
    assert seen[0] == pytest.approx([1e-3 * (1.0 - i / STEPS) for i in range(STEPS)])
    assert decayed[0]["heldout_loss"] != _run()[0]["heldout_loss"]  # the schedule changed the training


def test_a_spec_hands_its_optional_optimizer_and_scheduler_to_run_arms(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from fp8_policy.client.experiment.spec import load_spec

    base = "def model(): pass\ndef loss(m, b): pass\ndef batches(): pass\ndef heldout(): pass\n"
    plain = tmp_path / "plain.py"
    plain.write_text(base)
    assert {"optimizer", "scheduler"}.isdisjoint(load_spec(plain).run_kwargs())
    full = tmp_path / "full.py"
    full.write_text(base + "def optimizer(params): pass\ndef scheduler(opt): pass\n")
    kwargs = load_spec(full).run_kwargs()
    assert kwargs["optimizer"].__name__ == "optimizer" and kwargs["scheduler"].__name__ == "scheduler"
