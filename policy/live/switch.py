"""The `switch_now` event of a live run that follows a precision schedule (policy/recommend/schedule.py).

Belongs here: reading the schedule a live run was started with (its metadata's `schedule`: the JSON `schedule` of a
recommendation, or phases written by hand as `{"from_step": N, "triggers": [{"layer", "tensor", "level"}]}`), and
the rule: a later phase is due once the run's statistics reach its `from_step`, or earlier once one of its trigger
series (underflows%, any recipe prefix) reaches its level: the trend got to the planned point ahead of the plan.
Raised once per phase; its state (the phases raised) is kept with the run's detector state. A phase that starts at
the learning-rate decay (`lr_decay: true`, policy/recommend/schedule.py) is due when the lr the run streams in its
scalars (`advance_lr`, the same `LrDecay` rule as an uploaded scalars.jsonl: policy/parse/lr_schedule.py) shows the decay,
whatever its planned `from_step` (the run's own curve wins, as in the batch schedule); only while the run has streamed
no lr at all does its `from_step` decide. Must not be here: storing or sending events (service/live/,
service/alerts/).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fp8_policy.policy.live.events import LiveEvent
from fp8_policy.policy.names import split_metric_name
from fp8_policy.policy.parse.lr_schedule import LrDecay

KIND = "switch_now"
STATE_KEY = "__switch__"


@dataclass(frozen=True, slots=True)
class PlannedPhase:
    index: int
    from_step: int
    triggers: tuple[tuple[str, str, float], ...]  # (layer, tensor, underflows% level)
    lr_decay: bool = False  # due when the streamed lr curve shows its decay (module docstring)


def planned(metadata: Mapping[str, Any] | None) -> list[PlannedPhase]:
    """The later phases (from a step after 0) of the schedule in a live run's metadata; bad entries are skipped
    (metadata is advisory)."""
    phases = (metadata or {}).get("schedule")
    out: list[PlannedPhase] = []
    if not isinstance(phases, Sequence) or isinstance(phases, str):
        return out
    for index, phase in enumerate(phases):
        step = phase.get("from_step") if isinstance(phase, Mapping) else None
        if not isinstance(step, int) or isinstance(step, bool) or step <= 0:
            continue
        triggers = []
        for t in phase.get("triggers") or ():
            if isinstance(t, Mapping) and isinstance(t.get("layer"), str) and isinstance(t.get("tensor"), str):
                level = t.get("level")
                if isinstance(level, (int, float)) and not isinstance(level, bool) and level == level:
                    triggers.append((t["layer"], t["tensor"], float(level)))
        out.append(PlannedPhase(index, step, tuple(triggers), phase.get("lr_decay") is True))
    return out


def advance(
    state: dict[str, Any],
    phases: list[PlannedPhase],
    rank: int,
    names: list[str],
    offsets: np.ndarray,
    iterations: np.ndarray,
    values: np.ndarray,
) -> list[LiveEvent]:
    """Events for the phases this piece makes due; `state` (`{"raised": [phase index, ...]}`) is updated."""
    raised = set(state.get("raised", []))
    pending = [p for p in phases if p.index not in raised]
    if not pending or not len(iterations):
        return []
    last = int(np.max(iterations))
    series: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for k, name in enumerate(names):
        metric = split_metric_name(name)
        if metric is not None and metric.stat == "underflows%":
            series.setdefault((metric.layer, metric.tensor), []).append((name, k))
    events = []
    lr_streamed = LrDecay.from_dict(state.get("lr")).points > 0
    for phase in pending:
        event = _trend(phase, series, rank, offsets, iterations, values) if last < phase.from_step else None
        if event is None and last >= phase.from_step and not (phase.lr_decay and lr_streamed):
            event = _event(phase, "", "", "", rank, last, None, "step")
        if event is not None:
            events.append(event)
            raised.add(phase.index)
    state["raised"] = sorted(raised)
    return events


def advance_lr(
    document: dict[str, Any], phases: list[PlannedPhase], records: Iterable[Mapping[str, Any]]
) -> list[LiveEvent]:
    """Feed the streamed scalars' `lr` to the run's tracker (in the detector state `document`, under `STATE_KEY`,
    beside the phases raised); events for the pending lr-decay phases once it shows the decay. A run without an
    lr-decay phase keeps no tracker."""
    if not any(p.lr_decay for p in phases):
        return []
    state = document.setdefault(STATE_KEY, {})
    tracker = LrDecay.from_dict(state.get("lr"))
    seen = None
    for record in records:
        step = record.get("step")
        if isinstance(step, int) and not isinstance(step, bool) and "lr" in record:
            tracker.add(step, record["lr"])
            seen = step
    state["lr"] = tracker.to_dict()
    start = tracker.decay_start
    raised = set(state.get("raised", []))
    due = [p for p in phases if p.lr_decay and p.index not in raised]
    if start is None or not due:
        return []
    events = []
    for phase in due:
        events.append(_event(phase, "", "", "", 0, start, None, "lr", seen))
        raised.add(phase.index)
    state["raised"] = sorted(raised)
    return events


def _trend(
    phase: PlannedPhase,
    series: dict[tuple[str, str], list[tuple[str, int]]],
    rank: int,
    offsets: np.ndarray,
    iterations: np.ndarray,
    values: np.ndarray,
) -> LiveEvent | None:
    for layer, tensor, level in phase.triggers:
        for name, k in series.get((layer, tensor), ()):
            lo, hi = int(offsets[k]), int(offsets[k + 1])
            hit = np.flatnonzero(values[lo:hi] >= level)
            if hit.size:
                at = lo + int(hit[0])
                stat = name[len(f"{layer}_{tensor}_") :]
                return _event(phase, layer, tensor, stat, rank, int(iterations[at]), float(values[at]), "trend")
    return None


def _event(
    phase: PlannedPhase,
    layer: str,
    tensor: str,
    stat: str,
    rank: int,
    iteration: int,
    value: float | None,
    why: str,
    seen: int | None = None,
) -> LiveEvent:
    if why == "lr":
        cause = (
            f"the streamed lr curve shows the learning-rate decay starting at step {iteration} (seen at step {seen}; "
            f"planned from step {phase.from_step})"
        )
    elif why == "trend":
        cause = f"{layer} {tensor} {stat} reached {value:.4g}% at iteration {iteration}, before step {phase.from_step}"
    else:
        cause = f"the run reached step {phase.from_step} (iteration {iteration})"
    message = (
        f"Switch now to phase {phase.index}: {cause}. Restart from the latest checkpoint with phase {phase.index}'s "
        f"configuration (fp8-policy recommend RUN --phase {phase.index})."
    )
    detail: dict[str, Any] = {"phase": phase.index, "from_step": phase.from_step, "reason": why}
    if why == "lr":
        detail["lr_decay_start"] = iteration
    return LiveEvent(KIND, "critical", layer, tensor, stat, rank, iteration, value, message, detail)
