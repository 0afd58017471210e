"""policy.live.events: early-warning events from increments of statistics points."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fp8_policy.policy.live.events import SeriesState, advance, rank_divergence, theil_sen_slope
from fp8_policy.policy.records import MetricName
from fp8_policy.policy.thresholds import Thresholds

T = Thresholds()
UF = MetricName("model.layers.3.mlp.fc2", "gradient", "underflows%")
SCALE = MetricName("model.layers.3.mlp.fc2", "activation", "scale_inv_min")


def feed(state: SeriesState, metric: MetricName, its, vals, rank: int = 0, **kw):
    return advance(state, metric, rank, np.asarray(its, dtype=np.int64), np.asarray(vals, dtype=np.float64), T, **kw)


def test_band_crossings_fire_once_per_worse_band_of_the_sustained_level() -> None:
    """The level is the median of the last min_points (5) points: the warning band is reached when three of the
    last five points are in it, the critical band likewise."""
    state = SeriesState()

    events = feed(state, UF, np.arange(9) * 10, [0.1, 0.2, 0.6, 0.7, 2.5, 2.6, 2.7, 0.3, 2.8])

    assert [(e.kind, e.severity, e.iteration) for e in events] == [
        ("band_crossing", "warning", 40),
        ("band_crossing", "critical", 60),
    ]
    critical = events[1]
    assert critical.value == 2.5 and critical.detail["point_value"] == 2.7  # median of 0.6, 0.7, 2.5, 2.6, 2.7
    assert critical.stat == "underflows%" and critical.layer == UF.layer
    assert "median of the last 5 points" in critical.message


def test_a_warm_up_spike_crosses_no_band() -> None:
    """Delayed scaling's first iteration, logged while its scale is still exactly 1.0 (bionemo: 21.47 % gradient
    underflow at iteration 0), and one later spike: noise to the batch analysis, and to the live detectors."""
    assert (
        feed(SeriesState(), UF, np.arange(12) * 10, [89.6, 0.1, 0.2, 0.1, 0.1, 0.1, 6.0, 0.1, 0.1, 0.2, 0.1, 0.1]) == []
    )


def test_points_already_seen_raise_nothing_again() -> None:
    state = SeriesState()
    feed(state, UF, np.arange(6) * 10, [0.1, 3.0, 3.0, 3.0, 3.0, 3.0])

    assert feed(state, UF, np.arange(6) * 10, [0.1, 3.0, 3.0, 3.0, 3.0, 3.0]) == []


def test_a_recovered_series_can_cross_again() -> None:
    state = SeriesState()
    assert [e.iteration for e in feed(state, UF, np.arange(5) * 10, [0.6] * 5)] == [40]
    assert feed(state, UF, np.arange(5, 10) * 10, [0.1] * 5) == []  # back to ok

    events = feed(state, UF, np.arange(10, 15) * 10, [0.7] * 5)

    assert [e.iteration for e in events] == [120]


def test_rising_trend_is_projected_to_the_critical_crossing() -> None:
    state = SeriesState()
    its = np.arange(16) * 100
    vals = 0.001 * its  # +0.1 points per 100 iterations: 2.0 % at iteration 2000

    events = feed(state, UF, its, vals)

    projected = [e for e in events if e.kind == "projected_crossing"]
    assert len(projected) == 1
    assert projected[0].detail["projected_iteration"] == 2000 and projected[0].iteration == 1500
    assert feed(state, UF, [1600], [1.6]) == []  # raised once per episode


def test_a_single_spike_is_no_trend() -> None:
    state = SeriesState()
    vals = [0.1] * 20
    vals[10] = 1.9

    events = feed(state, UF, np.arange(20) * 10, vals)

    assert events == []  # one spike is no sustained level either
    assert theil_sen_slope(np.arange(20.0), np.asarray(vals)) == 0.0


def test_far_crossing_is_not_projected() -> None:
    state = SeriesState()
    its = np.arange(16) * 100

    assert feed(state, UF, its, 0.0002 * its, horizon_steps=1000) == []  # reaches 2 % at iteration 10000


def test_the_first_departure_from_the_unset_scale_is_warm_up_not_a_jump() -> None:
    """Delayed scaling logs scale_inv exactly 1.0 until its first amax: 1.0 -> 0.0069 at iteration 1 is the warm-up
    ending (the batch analysis' rule), a later 8x jump is an event."""
    state = SeriesState()

    assert feed(state, SCALE, [0, 1, 2], [1.0, 0.0069, 0.0070]) == []
    assert state.moved
    assert [e.kind for e in feed(state, SCALE, [3], [0.0007])] == ["scale_inv_drop"]
    assert [e.kind for e in feed(SeriesState(moved=True), SCALE, [0, 1], [1.0, 0.0069])] == ["scale_inv_drop"]


@pytest.mark.parametrize(("before", "after", "kind"), [(1e-2, 1e-3, "scale_inv_drop"), (1e-3, 9e-3, "scale_inv_rise")])
def test_scale_inv_jumps_of_eight_times(before: float, after: float, kind: str) -> None:
    state = SeriesState()

    events = feed(state, SCALE, [0, 10, 20], [before, before, after])

    assert [(e.kind, e.iteration) for e in events] == [(kind, 20)]
    assert events[0].detail["previous"] == before


def test_scale_inv_changes_below_the_factor_are_quiet() -> None:
    assert feed(SeriesState(), SCALE, [0, 10, 20], [1e-2, 2e-3, 1e-2]) == []


def test_first_nonfinite_value_of_an_episode() -> None:
    state = SeriesState()

    events = feed(state, SCALE, [0, 10, 20, 30, 40], [1e-2, float("nan"), float("inf"), 1e-2, float("-inf")])

    assert [(e.kind, e.iteration, e.severity) for e in events] == [
        ("nonfinite", 10, "severe"),
        ("nonfinite", 40, "severe"),
    ]


def test_one_rank_apart_from_the_others() -> None:
    states = {}
    for rank in range(4):
        state = states[(rank, UF)] = SeriesState()
        feed(state, UF, [0, 10, 20, 30], [3.0 if rank == 2 else 0.2] * 4, rank=rank)

    events = rank_divergence(states, T, {UF})

    assert [(e.kind, e.rank) for e in events] == [("rank_divergence", 2)]
    assert events[0].detail["others_median"] == pytest.approx(0.2)
    assert rank_divergence(states, T, {UF}) == []  # once per episode


def test_increments_raise_the_same_events_as_the_whole_series() -> None:
    rng = np.random.default_rng(3)
    its = np.arange(300) * 10
    vals = np.clip(0.2 + 0.0012 * its + rng.normal(0, 0.05, 300), 0, None)
    whole = feed(SeriesState(), UF, its, vals, horizon_steps=5000)
    state = SeriesState()
    pieces = []
    for lo, hi in [(0, 7), (7, 120), (120, 121), (121, 300)]:
        state = SeriesState.from_dict(json.loads(json.dumps(state.to_dict())))  # stored between increments
        pieces += feed(state, UF, its[lo:hi], vals[lo:hi], horizon_steps=5000)

    # projections are judged at the end of each increment (the live cadence): the early pieces foresee the
    # crossing that the whole series, fed at once, has already made
    assert "projected_crossing" in [e.kind for e in pieces] and "projected_crossing" not in [e.kind for e in whole]
    assert [(e.kind, e.severity) for e in pieces if e.kind == "band_crossing"] == [
        (e.kind, e.severity) for e in whole if e.kind == "band_crossing"
    ]
