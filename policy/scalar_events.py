"""Training-health warnings from the scalars a job logs per step (`{"step", "loss", "grad_norm", ...}` JSON lines).

Belongs here: the detectors and their small running state, pure like policy/live_events.py (which they share the
event shape with: `layer` is "training", `tensor` the scalar's name, `stat` "value").

- `scalar_spike`: `loss` or `grad_norm` far above its recent values: robust z-score
  0.6745·(x − median)/MAD ≥ `SPIKE_Z` over the trailing window (Iglewicz & Hoaglin's modified z-score,
  https://www.itl.nist.gov/div898/handbook/eda/section3/eda35h.htm), once per episode.
- `loss_plateau`: over the trailing window the loss changed by less than `PLATEAU_REL` of its level while the
  gradient norm did not decrease: training has stalled without converging.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fp8_policy.policy.live_events import LiveEvent
from fp8_policy.policy.thresholds import Severity

WINDOW = 64
MIN_POINTS = 16
SPIKE_Z = 6.0
PLATEAU_REL = 0.01
PLATEAU_POINTS = 48
WATCHED = ("loss", "grad_norm")
SCALAR_KEYS = ("loss", "grad_norm", "param_norm", "lr", "tokens_per_s", "mem_gb")


@dataclass(slots=True)
class ScalarState:
    last_step: int | None = None
    windows: dict[str, list[float]] = field(default_factory=dict)
    spiking: dict[str, bool] = field(default_factory=dict)
    plateau: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"s": self.last_step, "w": self.windows, "k": self.spiking, "p": self.plateau}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScalarState:
        return cls(
            data.get("s"),
            {k: list(v) for k, v in data.get("w", {}).items()},
            dict(data.get("k", {})),
            bool(data.get("p")),
        )


def parse_lines(text: bytes) -> tuple[list[dict[str, Any]], int]:
    """Records of whole JSON lines (objects with an integer `step`); returns (records, lines not understood)."""
    records, bad = [], 0
    for raw in text.splitlines():
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):
            bad += 1
            continue
        step = record.get("step") if isinstance(record, dict) else None
        if not isinstance(step, int) or isinstance(step, bool):
            bad += 1
            continue
        records.append(record)
    return records, bad


def _robust_z(window: list[float], value: float) -> float:
    values = np.asarray(window, dtype=np.float64)
    median = float(np.median(values))
    mad = float(np.median(np.abs(values - median)))
    if mad == 0.0:
        mad = max(abs(median) * 1e-2, 1e-12)  # a flat window: a departure of ~10 % of its level is a spike
    return 0.6745 * (value - median) / mad


def _event(
    kind: str, severity: Severity, name: str, step: int, value: float | None, message: str, **detail: Any
) -> LiveEvent:
    return LiveEvent(kind, severity.value, "training", name, "value", 0, step, value, message, detail)


def advance(state: ScalarState, records: list[dict[str, Any]]) -> list[LiveEvent]:
    """Feed new scalar records (step order) and return the events they raise."""
    events: list[LiveEvent] = []
    for record in records:
        step = int(record["step"])
        if state.last_step is not None and step <= state.last_step:
            continue
        state.last_step = step
        for name in WATCHED:
            value = record.get(name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                continue
            window = state.windows.setdefault(name, [])
            if len(window) >= MIN_POINTS:
                z = _robust_z(window, float(value))
                spiking = z >= SPIKE_Z
                if spiking and not state.spiking.get(name):
                    median = float(np.median(window))
                    events.append(
                        _event(
                            "scalar_spike",
                            Severity.CRITICAL,
                            name,
                            step,
                            float(value),
                            f"{name} spiked to {value:.4g} at step {step} (recent median {median:.4g}, "
                            f"robust z {z:.1f})",
                            robust_z=z,
                            median=median,
                        )
                    )
                state.spiking[name] = spiking
            window.append(float(value))
            del window[:-WINDOW]
        plateau = _plateau(state)
        if plateau is not None and not state.plateau:
            events.append(
                _event(
                    "loss_plateau",
                    Severity.WARNING,
                    "loss",
                    step,
                    plateau["loss"],
                    f"loss flat at {plateau['loss']:.4g} over the last {PLATEAU_POINTS} logged steps "
                    f"while grad_norm did not decrease ({plateau['grad_change']:+.1%})",
                    **plateau,
                )
            )
        state.plateau = plateau is not None
    return events


def _plateau(state: ScalarState) -> dict[str, float] | None:
    loss, grad = state.windows.get("loss", []), state.windows.get("grad_norm", [])
    if len(loss) < PLATEAU_POINTS or len(grad) < PLATEAU_POINTS:
        return None
    recent_loss = np.asarray(loss[-PLATEAU_POINTS:])
    recent_grad = np.asarray(grad[-PLATEAU_POINTS:])
    half = PLATEAU_POINTS // 2
    level = float(np.median(recent_loss[half:]))
    loss_change = abs(float(np.median(recent_loss[half:]) - np.median(recent_loss[:half])))
    grad_early, grad_late = float(np.median(recent_grad[:half])), float(np.median(recent_grad[half:]))
    grad_change = (grad_late - grad_early) / grad_early if grad_early else 0.0
    if level > 0 and loss_change < PLATEAU_REL * level and grad_change >= 0.0:
        return {"loss": level, "loss_change": loss_change, "grad_change": grad_change}
    return None
