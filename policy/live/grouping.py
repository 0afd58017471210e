"""One early warning per problem: the events a received piece raised, grouped per (layer, kind).

Belongs here: how the per-series events of policy/live/events.py and policy/live/scalar_events.py are merged before
they are stored, shown and alerted on. One change of the loss scale moves every scaling factor of a layer at
once: `scale_inv_min` and `scale_inv_max` of its activation, weight and gradient (and per rank) all jump in the
same step, and one event per series would print the same problem six or twelve times. A group keeps its worst
member's tensor, stat, rank, numbers and iteration (the worst severity, then the earliest iteration), so a
critical crossing is reported where it became critical, not where an earlier warning of the same layer began;
`detail.first_iteration` is the earliest iteration of the group, `detail.members` lists every grouped series and
`detail.series` their count. A group of one is the event unchanged.
"""

from __future__ import annotations

from fp8_policy.policy.live.events import LiveEvent
from fp8_policy.policy.thresholds import Severity

MAX_MEMBERS = 64  # series listed in one event's detail (the count is always complete)


def _worst_first(event: LiveEvent) -> tuple[int, int]:
    return (-Severity(event.severity).rank, event.iteration)


def _listed(values: list[str]) -> str:
    return ", ".join(dict.fromkeys(values))


def group_events(events: list[LiveEvent]) -> list[LiveEvent]:
    """The events of one piece with one event per (layer, kind), in the order each group first appeared."""
    groups: dict[tuple[str, str], list[LiveEvent]] = {}
    for event in events:
        groups.setdefault((event.layer, event.kind), []).append(event)
    return [members[0] if len(members) == 1 else _merged(members) for members in groups.values()]


def _merged(members: list[LiveEvent]) -> LiveEvent:
    worst = min(members, key=_worst_first)
    first = min(event.iteration for event in members)
    last = max(event.iteration for event in members)
    ranks = sorted({event.rank for event in members})
    where = f"iteration {first}" if first == last else f"iterations {first}–{last}"
    on_ranks = f" on ranks {', '.join(map(str, ranks))}" if len(ranks) > 1 else ""
    message = (
        f"{worst.layer}: {worst.kind.replace('_', ' ')} in {len(members)} series "
        f"({_listed([e.tensor for e in members])} × {_listed([e.stat for e in members])}){on_ranks} at {where}; "
        f"worst: {worst.message}"
    )
    listed = [
        {"tensor": e.tensor, "stat": e.stat, "rank": e.rank, "iteration": e.iteration, "value": e.value}
        for e in sorted(members, key=_worst_first)[:MAX_MEMBERS]
    ]
    return LiveEvent(
        worst.kind,
        worst.severity,
        worst.layer,
        worst.tensor,
        worst.stat,
        worst.rank,
        worst.iteration,
        worst.value,
        message,
        {**worst.detail, "series": len(members), "first_iteration": first, "members": listed},
    )
