"""One vocabulary of live event kinds: policy/vocabulary.EVENT_KINDS (the API's and the live schemas' names) is what
service/alerts accepts in a rule, and every kind a live detector raises is in it, `switch_now` (a precision
schedule's planned switch, policy/live/switch.py) included."""

from __future__ import annotations

import numpy as np

from fp8_policy.policy.live import scalar_events
from fp8_policy.policy.live import switch as live_switch
from fp8_policy.policy.live.events import SeriesState, advance, rank_divergence
from fp8_policy.policy.records import MetricName
from fp8_policy.policy.thresholds import Thresholds
from fp8_policy.policy.vocabulary import EVENT_KINDS, SCALAR_EVENT_KINDS, SCHEDULE_EVENT_KINDS, STATS_EVENT_KINDS
from fp8_policy.service.alerts.actions import ALL_EVENT_KINDS

T = Thresholds()


def test_the_alerts_accept_exactly_the_vocabulary() -> None:
    assert tuple(ALL_EVENT_KINDS) == EVENT_KINDS
    assert len(set(EVENT_KINDS)) == len(EVENT_KINDS)
    assert set(EVENT_KINDS) == {*STATS_EVENT_KINDS, *SCALAR_EVENT_KINDS, *SCHEDULE_EVENT_KINDS}
    assert "switch_now" in EVENT_KINDS and live_switch.KIND in SCHEDULE_EVENT_KINDS


def test_the_statistics_detectors_raise_every_kind_of_theirs_and_no_other() -> None:
    its = np.arange(40, dtype=np.int64) * 10
    raised = []
    underflow = MetricName("model.layers.1.mlp.fc1", "activation", "underflows%")
    raised += advance(SeriesState(), underflow, 0, its, np.round(np.linspace(0.0, 3.0, 40), 4), T)
    raised += advance(SeriesState(), underflow, 2, its, np.round(np.linspace(0.6, 1.5, 40), 4), T)  # projected
    scale = MetricName("model.layers.1.mlp.fc1", "activation", "scale_inv_min")
    raised += advance(SeriesState(), scale, 0, its, np.where(np.arange(40) % 10 < 5, 0.01, 1.0), T)
    raised += advance(SeriesState(), scale, 1, its, np.where(np.arange(40) == 20, np.nan, 0.01), T)
    states = {}
    for rank in range(4):
        states[(rank, underflow)] = state = SeriesState()
        advance(state, underflow, rank, its, np.full(40, 3.0 if rank == 3 else 0.1), T)
    raised += rank_divergence(states, T, {underflow})
    kinds = {event.kind for event in raised}
    assert kinds == set(STATS_EVENT_KINDS)


def test_the_scalar_detectors_raise_kinds_of_the_vocabulary() -> None:
    state = scalar_events.ScalarState()
    records = [{"step": k, "loss": 2.0 + 0.001 * (k % 3), "grad_norm": 1.0} for k in range(200)]
    records[150] = {"step": 150, "loss": 9.0, "grad_norm": 1.0}
    records[160] = {"step": 160, "loss": float("nan"), "grad_norm": 1.0}
    kinds = {event.kind for event in scalar_events.advance(state, records)}
    assert {"scalar_spike", "loss_plateau"} <= kinds <= set(EVENT_KINDS)
