"""Where a run's learning rate starts to decay, read from the `lr` of its training scalars (scalars.jsonl).

Belongs here: `LrDecay`, fed the (step, lr) records one at a time as the ingest checks the file
(policy/parse/scalars_file.py `ScalarsCheck`), so a million-line file costs a few numbers of memory, and its report. What a
schedule does with the decay start is policy/recommend/schedule.py's.

Rule: the peak is the highest lr logged; the plateau at it are the steps within `PEAK_TOLERANCE` (relative) of it
(a WSD schedule's stable phase, or the step a warm-up ends on before a cosine decay). The decay starts at the last
step of that plateau (the step the lr leaves it from), and counts as seen only when a later step logged an lr at
least `SEEN_DROP` below the peak by the end of the file: a run stopped during its stable phase shows no decay, and
an lr back at the peak (a restart, a cyclic schedule) starts the search again. Records in file order; a step
logged out of order (a resumed job re-logging earlier steps) is read as it comes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

PEAK_TOLERANCE = 1e-6  # relative: a float round trip reads a constant plateau as one, a cosine leaves it at once
SEEN_DROP = 0.02  # the lr must fall this share below its peak for a decay to count as seen


@dataclass(slots=True)
class LrDecay:
    points: int = 0
    peak: float = -math.inf
    peak_step: int | None = None  # last step on the plateau at the peak
    below_step: int | None = None  # first step below the plateau after `peak_step`
    lowest: float = math.inf  # lowest lr since `peak_step`

    def add(self, step: int, lr: object) -> None:
        """One record's `lr` (ignored unless a finite number >= 0)."""
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr < 0:
            return
        value = float(lr)
        self.points += 1
        if value > self.peak * (1 + PEAK_TOLERANCE) or self.peak_step is None:
            self.peak, self.peak_step, self.below_step, self.lowest = value, step, None, math.inf
        elif value >= self.peak * (1 - PEAK_TOLERANCE):
            self.peak_step, self.below_step, self.lowest = step, None, math.inf
        else:
            if self.below_step is None:
                self.below_step = step
            self.lowest = min(self.lowest, value)

    @property
    def decay_start(self) -> int | None:
        """The step the decay starts at, None when no decay is seen (module docstring)."""
        if self.below_step is None or not self.lowest <= self.peak * (1 - SEEN_DROP):
            return None
        return self.peak_step

    def to_dict(self) -> dict[str, Any]:
        """The tracker as JSON (a live run's detector state: policy/live/switch.py); infinities as None."""
        finite = {"peak": self.peak, "lowest": self.lowest}
        return {
            "points": self.points,
            "peak_step": self.peak_step,
            "below_step": self.below_step,
            **{k: (v if math.isfinite(v) else None) for k, v in finite.items()},
        }

    @classmethod
    def from_dict(cls, data: object) -> LrDecay:
        """Back from `to_dict`; anything else (an older or a damaged state) starts afresh."""
        if not isinstance(data, dict):
            return cls()
        try:
            peak, lowest = data.get("peak"), data.get("lowest")
            return cls(
                int(data.get("points", 0)),
                -math.inf if peak is None else float(peak),
                None if data.get("peak_step") is None else int(data["peak_step"]),
                None if data.get("below_step") is None else int(data["below_step"]),
                math.inf if lowest is None else float(lowest),
            )
        except (TypeError, ValueError):
            return cls()

    def report(self) -> dict[str, Any]:
        """The ingest report's `lr` entry of the scalars: {points, peak, decay_start}."""
        return {
            "points": self.points,
            "peak": self.peak if self.points else None,
            "decay_start": self.decay_start,
        }


def decay_start_of(report: object) -> int | None:
    """The decay start an ingest report's scalars entry recorded (None: no lr curve, or no decay seen in it)."""
    if not isinstance(report, dict):
        return None
    scalars = report.get("scalars")
    lr = scalars.get("lr") if isinstance(scalars, dict) and scalars.get("kept") else None
    start = lr.get("decay_start") if isinstance(lr, dict) else None
    return start if isinstance(start, int) and not isinstance(start, bool) and start >= 0 else None
