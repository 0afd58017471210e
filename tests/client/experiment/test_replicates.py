"""`run_replicates` (client/experiment/replicates.py): replicate r of every arm under the same seed, the data order
following the seed only when `batches` takes one, and `experiment_body` writing the replicates."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch
from torch import nn

from fp8_policy.client.experiment.arms import Arm, experiment_body
from fp8_policy.client.experiment.replicates import merge_replicates, run_replicates
from fp8_policy.client.experiment.runner import run_arms

STEPS = 4
ARMS = [Arm("bf16", "bf16", {}), Arm("other", "bf16", {}, rule="last_15pct")]


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))  # initial weights follow the arm's seed


def _seeded(seed: int = 3) -> Iterator[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    while True:
        yield torch.randn(4, 8, generator=generator)


def _fixed() -> Iterator[torch.Tensor]:
    return _seeded(3)


def _loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    return (model(batch) - batch.sum(dim=1, keepdim=True)).pow(2).mean()


def _plain(model: nn.Module, _arm: Arm, _seed: int) -> nn.Module:
    return model


HELD = [torch.ones(2, 8)]
KWARGS = {"model": _model, "loss": _loss, "heldout": lambda: HELD, "steps": STEPS, "apply": _plain}


def test_replicate_r_of_every_arm_trains_under_seed_plus_r_with_its_own_data_order() -> None:
    said: list[str] = []
    rows = run_replicates(ARMS, replicates=3, seed=10, batches=_seeded, progress=said.append, **KWARGS)
    assert [row["arm"].name for row in rows] == ["bf16", "other"] and rows[0]["seeds"] == [10, 11, 12]
    for row in rows:
        assert len(row["heldout_losses"]) == 3 and len(set(row["heldout_losses"])) == 3
        assert row["heldout_loss"] == pytest.approx(sum(row["heldout_losses"]) / 3)
    assert rows[0]["heldout_losses"] == rows[1]["heldout_losses"]  # same assignment, same replicate: same state
    alone = run_arms(ARMS[:1], batches=lambda: _seeded(11), seed=11, **KWARGS)[0]
    assert rows[0]["heldout_losses"][1] == alone["heldout_loss"]  # seed 11 and the data order of seed 11
    assert said[0].startswith("replicate 1/3 (seed 10): bf16") and len(said) == 6


def test_batches_without_a_seed_keep_one_data_order_and_seeds_can_be_given() -> None:
    rows = run_replicates(ARMS[:1], replicates=2, seeds=[11, 5], batches=_fixed, **KWARGS)
    assert rows[0]["seeds"] == [11, 5]
    alone = run_arms(ARMS[:1], batches=_fixed, seed=11, **KWARGS)[0]
    assert rows[0]["heldout_losses"][0] == alone["heldout_loss"]
    seeded_order = run_arms(ARMS[:1], batches=lambda: _seeded(11), seed=11, **KWARGS)[0]
    assert rows[0]["heldout_losses"][0] != seeded_order["heldout_loss"]
    with pytest.raises(ValueError, match="one seed per replicate"):
        run_replicates(ARMS, replicates=3, seeds=[1, 2], batches=_fixed, **KWARGS)
    with pytest.raises(ValueError, match="replicates must be 1 to 32"):
        run_replicates(ARMS, replicates=0, batches=_fixed, **KWARGS)


def test_the_experiment_body_carries_the_replicates_and_their_mean() -> None:
    rows = run_replicates(ARMS, replicates=2, seed=0, batches=_seeded, **KWARGS)
    rows[1]["heldout_losses"] = [rows[1]["heldout_losses"][0], math.nan]
    rows[1]["heldout_loss"] = math.nan
    body = experiment_body(rows, name="two seeds", run_id=7, seed=0)
    assert body["seeds"] == [0, 1] and body["seed"] == 0
    first, second = body["arms"]
    assert first["heldout_losses"] == rows[0]["heldout_losses"]
    assert first["heldout_loss"] == sum(rows[0]["heldout_losses"]) / 2
    assert math.isnan(second["heldout_losses"][1]) and math.isnan(second["heldout_loss"])
    single = experiment_body(run_replicates(ARMS, replicates=1, batches=_seeded, **KWARGS), name="one")
    assert "seeds" not in single and all("heldout_losses" not in arm for arm in single["arms"])


def test_merging_replicates_needs_the_arms_in_one_order_and_a_seed_each() -> None:
    row = lambda arm, loss: {"arm": arm, "steps": 3, "heldout_loss": loss, "step_time_s": 0.1, "train_loss": 1.0}  # noqa: E731
    merged = merge_replicates(
        [[row(ARMS[0], 2.0), row(ARMS[1], 2.5)], [row(ARMS[0], 2.2), row(ARMS[1], math.nan)]], [0, 1]
    )
    assert [m["heldout_losses"] for m in merged][0] == [2.0, 2.2] and merged[0]["heldout_loss"] == pytest.approx(2.1)
    assert math.isnan(merged[1]["heldout_loss"]) and merged[1]["seeds"] == [0, 1]  # a diverged replicate: diverged
    with pytest.raises(ValueError, match="one order"):
        merge_replicates([[row(ARMS[0], 2.0), row(ARMS[1], 2.5)], [row(ARMS[1], 2.5), row(ARMS[0], 2.0)]], [0, 1])
    with pytest.raises(ValueError, match="one seed per replicate"):
        merge_replicates([[row(ARMS[0], 2.0)]], [0, 1])
