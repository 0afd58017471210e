"""policy/compare/overlay.py: several runs' series on one iteration axis (max over ranks, union of iterations,
None where a run logged nothing, grouped means past the point budget)."""

from __future__ import annotations

import math

import numpy as np

from fp8_policy.policy.compare.overlay import align, max_over_ranks


def arr(*values: float) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)


def test_max_over_ranks_takes_the_worst_rank_and_nan_only_where_every_rank_is_nan() -> None:
    its, vals = max_over_ranks(
        [
            (np.array([0, 10, 20]), arr(1.0, math.nan, 3.0)),
            (np.array([10, 20, 30]), arr(2.0, 0.5, math.nan)),
        ]
    )
    assert its.tolist() == [0, 10, 20, 30]
    assert vals[:3].tolist() == [1.0, 2.0, 3.0] and math.isnan(vals[3])
    single = max_over_ranks([(np.array([5]), arr(math.inf))])
    assert single[0].tolist() == [5] and single[1].tolist() == [math.inf]


def test_runs_align_on_the_iteration_number() -> None:
    overlay = align([(np.array([0, 10, 20]), arr(1, 2, 3)), None, (np.array([5, 10]), arr(7, math.nan))])
    assert overlay.iterations == [0, 5, 10, 20] and overlay.grouped == 1
    assert overlay.values[0] == [1.0, None, 2.0, 3.0]
    assert overlay.values[1] == [None] * 4
    assert overlay.values[2][:2] == [None, 7.0] and math.isnan(overlay.values[2][2]) and overlay.values[2][3] is None
    assert overlay.points == [3, 0, 2]


def test_past_the_point_budget_consecutive_iterations_are_averaged() -> None:
    its = np.arange(0, 100)
    vals = its.astype(np.float64)
    vals[10:20] = math.nan  # a group with only NaN stays NaN (a gap), not "not logged"
    overlay = align([(its, vals), (np.array([95]), arr(4.0))], max_points=10)
    assert overlay.grouped == 10 and overlay.iterations == list(range(0, 100, 10))
    assert overlay.values[0][0] == 4.5 and math.isnan(overlay.values[0][1]) and overlay.values[0][9] == 94.5
    assert overlay.values[1] == [None] * 9 + [4.0]
    assert align([None, None]).iterations == []
