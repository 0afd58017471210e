"""The LR decay start read from a run's scalars.jsonl `lr` (policy/parse/lr_schedule.py), and a precision schedule that
uses it before `lr_decay_start`, saying which it used (policy/recommend/schedule.py)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fp8_policy.policy.parse.lr_schedule import LrDecay, decay_start_of
from fp8_policy.policy.parse.scalars_file import ScalarsCheck
from fp8_policy.policy.recommend import RecommendOptions, recommend


def wsd(step: int) -> float:
    """Warm-up 0-99, stable to 599, linear decay from 600."""
    if step < 100:
        return 3e-4 * (step + 1) / 100
    return 3e-4 if step < 600 else 3e-4 * max(0.0, 1 - (step - 600) / 400)


def cosine(step: int) -> float:
    return 3e-4 * (step + 1) / 50 if step < 50 else 3e-4 * 0.5 * (1 + math.cos(math.pi * (step - 50) / 950))


def decay(lrs, steps=None) -> LrDecay:
    tracker = LrDecay()
    for step, lr in zip(steps if steps is not None else range(len(lrs)), lrs, strict=True):
        tracker.add(step, lr)
    return tracker


@pytest.mark.parametrize(
    "curve, last, start",
    [
        (wsd, 1000, 600),  # warm-up-stable-decay: the first step below the stable phase
        (wsd, 550, None),  # stopped in the stable phase: no decay seen
        (wsd, 610, 600),  # 10 steps into the decay: 2.25 % below the peak, seen
        (wsd, 605, None),  # 5 steps in: 1 % below the peak, not yet seen
        (cosine, 1000, 50),  # cosine right after its warm-up
        (lambda s: 1e-4, 300, None),  # constant
    ],
)
def test_the_decay_start_is_read_from_the_curve(curve, last: int, start: int | None) -> None:
    tracker = decay([curve(s) for s in range(last)])
    assert tracker.decay_start == start


def test_a_restart_back_to_the_peak_searches_again_and_bad_values_are_ignored() -> None:
    lrs = [1.0] * 10 + [0.5] * 5 + [1.0] * 5 + [0.9] * 5 + [None, "x", float("nan"), -1.0, True]
    assert decay(lrs).decay_start == 19


def test_the_ingest_report_carries_it_and_a_stored_run_reads_it_back() -> None:
    check = ScalarsCheck("scalars.jsonl")
    for step in range(1000):
        check.line(json.dumps({"step": step, "loss": 2.0, "lr": wsd(step)}).encode() + b"\n")
    report = check.verdict()
    assert report["lr"] == {"points": 1000, "peak": pytest.approx(3e-4), "decay_start": 600}
    assert decay_start_of({"scalars": report}) == 600
    assert decay_start_of({"scalars": {**report, "kept": False}}) is None and decay_start_of(None) is None
    no_lr = ScalarsCheck("scalars.jsonl")
    no_lr.line(b'{"step": 0, "loss": 2.0}\n')
    assert "lr" not in no_lr.verdict()


def test_the_schedule_uses_the_curve_first_and_says_which(tmp_path: Path) -> None:
    from tests.policy.recommend.test_mixed_format import METADATA, mixed_run

    data = replace(mixed_run(tmp_path), lr_decay_from_scalars=600)
    given = replace(RecommendOptions.from_metadata(METADATA), lr_decay_start=900)
    rec = recommend(data, options=given)
    assert [p.from_step for p in rec.schedule] == [0, 600]
    assert "detected in the run's scalars.jsonl lr curve; lr_decay_start 900 given, not used" in rec.schedule[1].reason
    fallback = recommend(replace(data, lr_decay_from_scalars=None), options=given)
    assert [p.from_step for p in fallback.schedule] == [0, 900]
    assert "lr_decay_start option / run metadata" in fallback.schedule[1].reason
    assert np.all([p.from_step >= 0 for p in rec.schedule])
