"""A live run following a schedule whose phase starts at the learning-rate decay (`lr_decay: true`): the lr it
streams in its scalars decides when `switch_now` is raised (policy/live/switch.py `advance_lr`), not the planned
`from_step`; without any streamed lr the step still decides. The tracker survives the detector state's JSON."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from fp8_policy.policy.live import switch as live_switch
from fp8_policy.policy.parse.lr_schedule import LrDecay
from fp8_policy.policy.recommend import RecommendOptions, recommend
from tests.policy.parse.test_lr_schedule import cosine, wsd

NAMES = ["model.layers.1.mlp.fc1_activation_underflows%"]
SCHEDULE = {"schedule": [{"from_step": 0}, {"from_step": 9000, "triggers": [], "lr_decay": True}]}


def records(steps, lr=wsd):
    return [{"step": s, "loss": 2.0, "lr": lr(s)} for s in steps]


def stats_at(state, phases, step):
    return live_switch.advance(state, phases, 0, NAMES, np.array([0, 1]), np.array([step]), np.array([0.1]))


def test_the_streamed_lr_decay_raises_the_lr_phase_before_its_planned_step() -> None:
    phases = live_switch.planned(SCHEDULE)
    assert [p.lr_decay for p in phases] == [True]
    document: dict = {}
    assert live_switch.advance_lr(document, phases, records(range(0, 600))) == []  # warm-up and plateau
    document = json.loads(json.dumps(document))  # as the state is stored
    assert stats_at(document[live_switch.STATE_KEY], phases, 650) == []
    (event,) = live_switch.advance_lr(document, phases, records(range(600, 640)))
    assert event.kind == "switch_now" and event.iteration == 600  # the last step at the peak (wsd: stable to 600)
    assert event.detail == {"phase": 1, "from_step": 9000, "reason": "lr", "lr_decay_start": 600}
    assert "streamed lr curve" in event.message and "planned from step 9000" in event.message
    assert live_switch.advance_lr(document, phases, records(range(640, 700))) == []  # once per phase
    assert stats_at(document[live_switch.STATE_KEY], phases, 9000) == []


def test_a_streamed_lr_still_at_its_peak_holds_the_planned_step_back() -> None:
    phases = live_switch.planned(SCHEDULE)
    document: dict = {}
    live_switch.advance_lr(document, phases, records(range(100, 200), lr=lambda s: 3e-4))
    assert stats_at(document[live_switch.STATE_KEY], phases, 9500) == []  # the run's own curve shows no decay yet
    (event,) = live_switch.advance_lr(
        document, phases, records(range(9400, 9600), lr=lambda s: 3e-4 * (1 - (s - 9500) / 900) if s > 9500 else 3e-4)
    )
    assert event.detail["lr_decay_start"] == 9500


def test_without_a_streamed_lr_the_planned_step_decides_and_other_phases_keep_no_tracker() -> None:
    phases = live_switch.planned(SCHEDULE)
    document: dict = {}
    live_switch.advance_lr(document, phases, [{"step": s, "loss": 2.0} for s in range(100)])  # no lr logged
    (event,) = stats_at(document.setdefault(live_switch.STATE_KEY, {}), phases, 9000)
    assert event.detail["reason"] == "step"
    plain = live_switch.planned({"schedule": [{"from_step": 0}, {"from_step": 500}]})
    untouched: dict = {}
    assert live_switch.advance_lr(untouched, plain, records(range(1000), lr=cosine)) == [] and untouched == {}


def test_the_tracker_round_trips_and_a_damaged_state_starts_afresh() -> None:
    tracker = LrDecay()
    for s in range(700):
        tracker.add(s, wsd(s))
    again = LrDecay.from_dict(json.loads(json.dumps(tracker.to_dict())))
    assert again == tracker and again.decay_start == 600
    assert LrDecay.from_dict({"points": "x"}) == LrDecay() and LrDecay.from_dict(None) == LrDecay()


def test_the_recommendations_lr_phase_is_marked_for_the_live_switch(tmp_path: Path) -> None:
    from tests.policy.recommend.test_mixed_format import METADATA, mixed_run

    rec = recommend(mixed_run(tmp_path), options=replace(RecommendOptions.from_metadata(METADATA), lr_decay_start=900))
    body = rec.to_dict()["schedule"]
    assert [p["lr_decay"] for p in body] == [False, True]
    (phase,) = live_switch.planned({"schedule": body})
    assert phase.lr_decay and phase.from_step == 900
