"""Severity bands, ordering and per-request threshold overrides."""

from __future__ import annotations

import math

import pytest

from fp8_policy.policy.thresholds import Severity, Thresholds, worst


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.0, Severity.OK),
        (0.4999, Severity.OK),
        (0.5, Severity.WARNING),
        (1.99, Severity.WARNING),
        (2.0, Severity.CRITICAL),
        (3.99, Severity.CRITICAL),
        (4.0, Severity.SEVERE),
        (21.47, Severity.SEVERE),
        (math.nan, Severity.OK),
    ],
)
def test_default_bands(value: float, expected: Severity) -> None:
    assert Thresholds().band(value) is expected


def test_severity_orders_by_badness_not_alphabet() -> None:
    assert Severity.OK < Severity.WARNING < Severity.CRITICAL < Severity.SEVERE
    assert sorted([Severity.SEVERE, Severity.OK, Severity.CRITICAL]) == [
        Severity.OK,
        Severity.CRITICAL,
        Severity.SEVERE,
    ]
    assert worst([Severity.WARNING, Severity.SEVERE, Severity.OK]) is Severity.SEVERE
    assert worst([]) is Severity.OK
    assert Severity.SEVERE.value == "severe"


def test_overrides_apply_and_coerce() -> None:
    t = Thresholds.from_overrides({"critical": 3, "severe": 6.5, "min_points": 7.0})
    assert (t.critical, t.severe, t.min_points) == (3.0, 6.5, 7)
    assert isinstance(t.min_points, int)
    assert t.band(2.5) is Severity.WARNING
    assert Thresholds.from_overrides(None) == Thresholds()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"criticl": 3}, "unknown threshold 'criticl'"),
        ({"critical": "3"}, "threshold 'critical' must be a number"),
        ({"warning": True}, "threshold 'warning' must be a number"),
        ({"critical": 0.3}, "warning < critical < severe"),
        ({"severe": 1.0}, "warning < critical < severe"),
        ({"min_points": 2.5}, "threshold 'min_points' must be an integer"),
        ({"uniform_fraction": 1.5}, "threshold 'uniform_fraction' must be in (0.0, 1.0]"),
        ({"window_fraction": 0}, "threshold 'window_fraction' must be in (0.0, 1.0]"),
        ({"scale_jump_factor": 1.0}, "threshold 'scale_jump_factor' must be in (1.0, 1000000.0]"),
        ({"critical": math.inf}, "threshold 'critical' must be finite"),
        ({"rank_outlier_min_ranks": 3}, "threshold 'rank_outlier_min_ranks' must be in [4, 1000000]"),
        # every threshold is bounded above too: a request can set any of them
        ({"min_points": 10**18}, "threshold 'min_points' must be in [1, 1000000]"),
        ({"trend_max_candidates": 1e300}, "threshold 'trend_max_candidates' must be in [1, 1000000]"),
        ({"severe": 1e300}, "threshold 'severe' must be in [0.0, 100.0]"),
        ({"trend_horizon": 1e300}, "threshold 'trend_horizon' must be in [0.0, 1000000.0]"),
        ({"rank_outlier_ratio": 1e300}, "threshold 'rank_outlier_ratio' must be in (1.0, 1000000.0]"),
    ],
)
def test_invalid_overrides_raise_clear_value_errors(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as error:
        Thresholds.from_overrides(overrides)
    assert message in str(error.value)


def test_overrides_must_be_a_mapping() -> None:
    with pytest.raises(ValueError, match="must be an object"):
        Thresholds.from_overrides([("critical", 3)])  # type: ignore[arg-type]


def test_to_dict_round_trips() -> None:
    t = Thresholds(critical=2.5)
    assert Thresholds.from_overrides(t.to_dict()) == t
