"""Before/after numbers of a comparison with a noise floor: relative changes only where the base is large
enough to carry one.

Rule: underflows% values below `NOISE_FLOOR` (0.05 percentage points, half of the 0.1 the bionemo analyzer prints
as its smallest visible step) are noise: a change from such a base is given in absolute percentage points, never
as a percent ("+25512 % (0.00 % → 0.24 %)" says nothing). `relative` is then None and `below_noise_floor` true.
"""

from __future__ import annotations

import math

NOISE_FLOOR = 0.05  # percentage points of underflows%


def change(base: float | None, head: float | None, floor: float = NOISE_FLOOR) -> dict[str, float | bool | None]:
    delta = head - base if base is not None and head is not None else None
    below = base is not None and abs(base) < floor
    relative = delta / base if delta is not None and base is not None and not below else None
    return {
        "base": _num(base),
        "head": _num(head),
        "change": _num(delta),
        "relative": _num(relative),
        "below_noise_floor": below,
    }


def describe(base: float, head: float, relative: float | None) -> str:
    """ "−34% (mean 1.20% → 0.79%)" above the floor, "+0.24 points (0.00% → 0.24%)" below it."""
    if relative is None:
        return f"{head - base:+.2f} points ({base:.2f}% → {head:.2f}%)".replace("-", "−", 1)
    sign = "−" if relative < 0 else "+"
    return f"{sign}{abs(relative) * 100:.0f}% (mean {base:.2f}% → {head:.2f}%)"


def _num(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 4)
