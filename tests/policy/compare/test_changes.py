"""The noise floor of compare (issue 12 item 7): no percent change from a base that is noise."""

from __future__ import annotations

from fp8_policy.policy.compare.changes import NOISE_FLOOR, change, describe


def test_below_the_floor_there_is_no_relative_change():
    tiny = change(0.00094, 0.24)
    assert tiny["relative"] is None and tiny["below_noise_floor"] is True and tiny["change"] == 0.2391
    assert describe(0.00094, 0.24, tiny["relative"]) == "+0.24 points (0.00% → 0.24%)"


def test_above_the_floor_the_relative_change_is_kept():
    normal = change(1.2, 0.79)
    assert normal["relative"] == round((0.79 - 1.2) / 1.2, 4) and normal["below_noise_floor"] is False
    assert describe(1.2, 0.79, normal["relative"]) == "−34% (mean 1.20% → 0.79%)"
    assert change(NOISE_FLOOR, 2 * NOISE_FLOOR)["relative"] == 1.0


def test_missing_sides_and_a_drop_in_points():
    assert change(None, 1.0) == {
        "base": None,
        "head": 1.0,
        "change": None,
        "relative": None,
        "below_noise_floor": False,
    }
    assert describe(0.03, 0.0, None) == "−0.03 points (0.03% → 0.00%)"
