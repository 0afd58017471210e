"""Training-health warnings from the scalars a job logs per step (`{"step", "loss", "grad_norm", ...}` JSON lines).

Belongs here: the detectors and their small running state, pure like policy/live/events.py (which they share the
event shape with: `layer` is "training", `tensor` the scalar's name, `stat` "value").

- `scalar_spike`: `loss` or `grad_norm` far above where its recent trend puts it, once per episode. The expected
  level is a Theil–Sen line through the last `TREND_POINTS` values (a median of pairwise slopes: a past spike
  cannot tilt it), extrapolated to the new step and never below their minimum; the noise is the MAD of the
  step-to-step differences over the trailing window, 1.4826·MAD/√2 (differences remove the trend, so a falling
  loss does not count as noise; Iglewicz & Hoaglin's robust scale,
  https://www.itl.nist.gov/div898/handbook/eda/section3/eda35h.htm). A spike is at least `SPIKE_Z` noise units
  AND `SPIKE_RATIO` times above the expected level: a trailing-window median alone misses a 3× jump on a
  decaying loss (the window's own spread is the decay), and the ratio keeps batch noise on a very smooth
  curve from paging anyone.
  A `loss` spike is critical, a `grad_norm` spike a warning: on small batches the grad norm spikes now and then
  on a healthy run (what the loss does next is what matters). Warm-up: while a logged `lr` still rises (the
  learning-rate warm-up) the values only fill the window; the batch analysis likewise leaves a run's start out.
- `nonfinite`: `loss` or `grad_norm` logged as NaN or ±inf (JSON's NaN / Infinity, as Python's json writes them),
  once per episode, as the statistics series' `nonfinite` (policy/live/events.py): a diverged step, which every
  other detector leaves out.
- `loss_plateau`: over the second half of the steps logged so far the loss changed by less than `PLATEAU_REL` of
  its level while the gradient norm did not decrease: training has stalled without converging. The horizon grows
  with the run (a healthy loss late in training moves less than 1 % in any few dozen steps, but not over half the
  run); the earlier level comes from a thinned history of block medians (`BLOCK` records each, at most
  `MAX_HISTORY` blocks). Once raised, the plateau ends only when the loss moves by 3× `PLATEAU_REL` from the level
  it was raised at, so noise around the threshold does not raise it again and again.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from statistics import median
from typing import TYPE_CHECKING, Any, NamedTuple

from fp8_policy.policy.live.compact import Keys, as_stored, from_compact, lists_by_name, rows, to_compact
from fp8_policy.policy.parse.scalars_file import MAX_SCALARS_LINES, is_negative_step, last_lines_start, record_of
from fp8_policy.policy.thresholds import Severity

if TYPE_CHECKING:
    from fp8_policy.policy.live.events import LiveEvent

WINDOW = 64
MIN_POINTS = 8
TREND_POINTS = 16
SPIKE_Z = 6.0
SPIKE_RATIO = 1.5
PLATEAU_REL = 0.01
PLATEAU_POINTS = 48
BLOCK = 8
MAX_HISTORY = 256
WATCHED = ("loss", "grad_norm")
SCALAR_KEYS = ("loss", "grad_norm", "param_norm", "lr", "tokens_per_s", "mem_gb")


@dataclass(slots=True)
class ScalarState:
    last_step: int | None = None
    windows: dict[str, list[float]] = field(default_factory=dict)
    spiking: dict[str, bool] = field(default_factory=dict)
    plateau: bool = False
    plateau_level: float | None = None  # the loss level when the current plateau was raised
    first_step: int | None = None
    count: int = 0  # records with both loss and grad_norm
    history: list[list[float]] = field(default_factory=list)  # [[center step, loss median, grad_norm median]]
    steps: list[int] = field(default_factory=list)  # steps of the current block's records
    nonfinite: dict[str, bool] = field(default_factory=dict)  # the last value of a scalar was NaN/inf
    lr_peak: float | None = None  # the largest lr logged so far (a larger one: still warming up)

    def to_dict(self) -> dict[str, Any]:
        return to_compact(self, _SCALAR_STATE_KEYS)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScalarState:
        return from_compact(cls, data, _SCALAR_STATE_KEYS)


_SCALAR_STATE_KEYS: Keys = {
    "last_step": ("s", as_stored),
    "windows": ("w", lists_by_name),
    "spiking": ("k", dict),
    "plateau": ("p", bool),
    "plateau_level": ("l", as_stored),
    "first_step": ("f", as_stored),
    "count": ("c", int),
    "history": ("h", rows),
    "steps": ("b", list),
    "nonfinite": ("n", dict),
    "lr_peak": ("r", as_stored),
}


class ParsedScalars(NamedTuple):
    records: list[dict[str, Any]]
    unreadable: int  # lines that are no JSON object with an integer `step`
    negative_steps: int  # records whose step is below 0: skipped (policy/parse/scalars_file.py's docstring)


def parse_lines(text: bytes) -> ParsedScalars:
    """Records of whole JSON lines (objects with an integer `step` of 0 or more), with what was left out; of the
    last MAX_SCALARS_LINES lines only, read one at a time (a piece of millions of tiny lines is no list of them)."""
    records, bad, negative = [], 0, 0
    start, size = last_lines_start(text, MAX_SCALARS_LINES), len(text)
    while start < size:
        end = text.find(b"\n", start)
        end = size if end < 0 else end
        raw, start = text[start:end], end + 1
        if not raw.strip():
            continue
        record = record_of(raw)
        if record is None:
            bad += 1
        elif is_negative_step(record):
            negative += 1
        else:
            records.append(record)
    return ParsedScalars(records, bad, negative)


def expected_level(window: list[float]) -> tuple[float, float]:
    """(level, noise) the next value of a series is expected at, from its trailing window (see the docstring).
    Plain Python on at most `WINDOW` floats: numpy's per-call overhead would dominate at this size."""
    recent = window[-TREND_POINTS:]
    n = len(recent)
    slope = median((recent[j] - recent[i]) / (j - i) for i in range(n) for j in range(i + 1, n))
    intercept = median(v - slope * x for x, v in enumerate(recent))
    level = max(intercept + slope * n, min(recent))
    diffs = [b - a for a, b in zip(window, window[1:], strict=False)]
    centre = median(diffs)
    noise = 1.4826 * median(abs(d - centre) for d in diffs) / math.sqrt(2.0)
    floor = max(abs(level) * 1e-3, 1e-12)  # a flat window: a departure of a few % of its level is a spike
    return level, max(noise, floor)


def _is_spike(window: list[float], value: float) -> tuple[bool, float, float]:
    level, noise = expected_level(window)
    z = (value - level) / noise
    above = value >= SPIKE_RATIO * level if level > 0 else True
    return z >= SPIKE_Z and above, z, level


def _event(
    kind: str, severity: Severity, name: str, step: int, value: float | None, message: str, **detail: Any
) -> LiveEvent:
    # imported on first use (it imports numpy): serve's start-up path, tests/service/app/test_start_up_imports.py
    from fp8_policy.policy.live.events import LiveEvent

    return LiveEvent(kind, severity.value, "training", name, "value", 0, step, value, message, detail)


def advance(state: ScalarState, records: list[dict[str, Any]]) -> list[LiveEvent]:
    """Feed new scalar records (step order) and return the events they raise."""
    events: list[LiveEvent] = []
    for record in records:
        step = int(record["step"])
        if state.last_step is not None and step <= state.last_step:
            continue
        state.last_step = step
        if state.first_step is None:
            state.first_step = step
        warming = _lr_warming_up(state, record.get("lr"))
        seen = 0
        for name in WATCHED:
            value = record.get(name)
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            if not math.isfinite(value):
                if not state.nonfinite.get(name):
                    text = str(float(value))  # nan, inf, -inf
                    message = f"{name} is {text} at step {step}"
                    events.append(_event("nonfinite", Severity.SEVERE, name, step, None, message, value_text=text))
                state.nonfinite[name] = True
                continue
            state.nonfinite[name] = False
            window = state.windows.setdefault(name, [])
            if len(window) >= MIN_POINTS and not warming:
                spiking, z, level = _is_spike(window, float(value))
                if spiking and not state.spiking.get(name):
                    events.append(
                        _event(
                            "scalar_spike",
                            Severity.CRITICAL if name == "loss" else Severity.WARNING,
                            name,
                            step,
                            float(value),
                            f"{name} spiked to {value:.4g} at step {step} ({value / level:.3g}× the "
                            f"{level:.4g} its recent trend expects, robust z {z:.1f})"
                            if level > 0
                            else f"{name} spiked to {value:.4g} at step {step} (trend expects {level:.4g}, "
                            f"robust z {z:.1f})",
                            robust_z=z,
                            expected=level,
                        )
                    )
                state.spiking[name] = spiking
            window.append(float(value))
            del window[:-WINDOW]
            seen += 1
        if seen == len(WATCHED):
            _remember(state, step)
        plateau = _plateau(state, step)
        if plateau is not None and not state.plateau:
            events.append(
                _event(
                    "loss_plateau",
                    Severity.WARNING,
                    "loss",
                    step,
                    plateau["loss"],
                    f"loss flat at {plateau['loss']:.4g} since step {int(plateau['since_step'])} "
                    f"({plateau['loss_change'] / plateau['loss']:+.2%}) while grad_norm did not decrease "
                    f"({plateau['grad_change']:+.1%})",
                    **plateau,
                )
            )
            state.plateau_level = plateau["loss"]
        state.plateau = plateau is not None
    return events


def _lr_warming_up(state: ScalarState, lr: object) -> bool:
    """Whether this record's `lr` is above every earlier one (the learning-rate warm-up); remembers the peak."""
    if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not math.isfinite(lr):
        return False
    rising = state.lr_peak is None or lr > state.lr_peak
    state.lr_peak = max(float(lr), state.lr_peak or float(lr))
    return rising


def _remember(state: ScalarState, step: int) -> None:
    """Count a record with both series; every `BLOCK` of them becomes one history entry (thinned when full)."""
    state.count += 1
    state.steps.append(step)
    if len(state.steps) < BLOCK:
        return
    loss, grad = state.windows["loss"][-BLOCK:], state.windows["grad_norm"][-BLOCK:]
    state.history.append([float(median(state.steps)), median(loss), median(grad)])
    state.steps = []
    if len(state.history) > MAX_HISTORY:
        state.history = state.history[::2]


def _plateau(state: ScalarState, step: int) -> dict[str, float] | None:
    """The loss level now against the history around the middle of the steps logged so far."""
    if state.count < PLATEAU_POINTS or state.first_step is None:
        return None
    middle = (state.first_step + step) / 2
    at = bisect_right([h[0] for h in state.history], middle) - 1
    if at < 0:
        return None
    around = state.history[max(0, at - 2) : at + 3]  # ~5 blocks: a level as steady as the one now
    since = state.history[at][0]
    loss_then, grad_then = median(h[1] for h in around), median(h[2] for h in around)
    level = median(state.windows["loss"][-PLATEAU_POINTS:])
    grad_now = median(state.windows["grad_norm"][-PLATEAU_POINTS:])
    loss_change = level - loss_then
    grad_change = (grad_now - grad_then) / grad_then if grad_then else 0.0
    if level <= 0:
        return None
    if state.plateau and state.plateau_level is not None:  # stays until the loss clearly moves again
        stalled = abs(level - state.plateau_level) < 3 * PLATEAU_REL * state.plateau_level
    else:
        stalled = abs(loss_change) < PLATEAU_REL * level and grad_change >= 0.0
    if stalled:
        return {"loss": level, "loss_change": loss_change, "grad_change": grad_change, "since_step": since}
    return None
