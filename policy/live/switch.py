"""The `switch_now` event of a live run that follows a precision schedule (policy/recommend/schedule.py).

Belongs here: reading the schedule a live run was started with (its metadata's `schedule`: the JSON `schedule` of a
recommendation, or phases written by hand as `{"from_step": N, "triggers": [{"layer", "tensor", "level"}]}`), and
the rule: a later phase is due once the run's statistics reach its `from_step`, or earlier once one of its trigger
series (underflows%, any recipe prefix) reaches its level: the trend got to the planned point ahead of the plan.
Raised once per phase; its state (the phases raised) is kept with the run's detector state. Must not be here:
storing or sending events (service/live/, service/alerts/).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fp8_policy.policy.live.events import LiveEvent
from fp8_policy.policy.names import split_metric_name

KIND = "switch_now"
STATE_KEY = "__switch__"


@dataclass(frozen=True, slots=True)
class PlannedPhase:
    index: int
    from_step: int
    triggers: tuple[tuple[str, str, float], ...]  # (layer, tensor, underflows% level)


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
        out.append(PlannedPhase(index, step, tuple(triggers)))
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
    for phase in pending:
        event = _trend(phase, series, rank, offsets, iterations, values) if last < phase.from_step else None
        if event is None and last >= phase.from_step:
            event = _event(phase, "", "", "", rank, last, None, "step")
        if event is not None:
            events.append(event)
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
    phase: PlannedPhase, layer: str, tensor: str, stat: str, rank: int, iteration: int, value: float | None, why: str
) -> LiveEvent:
    if why == "trend":
        cause = f"{layer} {tensor} {stat} reached {value:.4g}% at iteration {iteration}, before step {phase.from_step}"
    else:
        cause = f"the run reached step {phase.from_step} (iteration {iteration})"
    message = (
        f"Switch now to phase {phase.index}: {cause}. Restart from the latest checkpoint with phase {phase.index}'s "
        f"configuration (fp8-policy recommend RUN --phase {phase.index})."
    )
    detail = {"phase": phase.index, "from_step": phase.from_step, "reason": why}
    return LiveEvent(KIND, "critical", layer, tensor, stat, rank, iteration, value, message, detail)
