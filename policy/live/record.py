"""The record of one live early warning (`LiveEvent`) and how a detector builds one (`_event`).

Belongs here: the event's fields and JSON shape, shared by the statistics detectors (policy/live/events.py,
policy/live/batch.py, policy/live/levels.py) and the scalar ones (policy/live/scalar_events.py). Must not be here: any
detector.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fp8_policy.policy.records import MetricName
from fp8_policy.policy.thresholds import Severity


@dataclass(frozen=True, slots=True)
class LiveEvent:
    kind: str
    severity: str
    layer: str
    tensor: str
    stat: str
    rank: int
    iteration: int
    value: float | None
    message: str
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """dataclasses.asdict without its deepcopy of every leaf (each stored event becomes a dict for the alerts)."""
        return {name: _plain(getattr(self, name)) for name in self.__slots__}


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_plain(v) for v in value)
    return value


def _event(
    kind: str,
    severity: Severity | str,
    metric: MetricName,
    rank: int,
    iteration: int,
    value: float | None,
    message: str,
    **detail: Any,
) -> LiveEvent:
    return LiveEvent(
        kind,
        Severity(severity).value,
        metric.layer,
        metric.tensor,
        metric.stat_key,
        rank,
        iteration,
        value,
        message,
        detail,
    )
