"""policy.live.grouping: one event per (layer, kind) per piece, with every grouped series listed."""

from __future__ import annotations

from fp8_policy.policy.live.events import LiveEvent
from fp8_policy.policy.live.grouping import group_events


def drop(layer: str, tensor: str, stat: str, iteration: int = 400, rank: int = 0, severity: str = "critical"):
    return LiveEvent(
        "scale_inv_drop",
        severity,
        layer,
        tensor,
        stat,
        rank,
        iteration,
        1e-4,
        f"{layer} {tensor} {stat} dropped",
        {"ratio": 0.01},
    )


def test_one_scale_jump_on_every_tensor_and_stat_is_one_event() -> None:
    layer = "model.layers.1.mlp.fc2"
    events = [
        drop(layer, t, s) for t in ("activation", "weight", "gradient") for s in ("scale_inv_min", "scale_inv_max")
    ]

    grouped = group_events(events)

    assert len(grouped) == 1
    event = grouped[0]
    assert (event.kind, event.layer, event.iteration, event.severity) == ("scale_inv_drop", layer, 400, "critical")
    assert event.detail["series"] == 6 and event.detail["ratio"] == 0.01
    assert {(m["tensor"], m["stat"]) for m in event.detail["members"]} == {(e.tensor, e.stat) for e in events}
    assert (
        "6 series" in event.message and "activation, weight, gradient × scale_inv_min, scale_inv_max" in event.message
    )


def test_groups_keep_layers_and_kinds_apart_and_take_the_worst_member() -> None:
    a, b = "model.layers.1.mlp.fc2", "model.layers.2.mlp.fc2"
    band = LiveEvent("band_crossing", "warning", a, "gradient", "underflows%", 0, 300, 0.7, "warning band", {})
    worse = LiveEvent("band_crossing", "severe", a, "activation", "underflows%", 0, 350, 4.5, "severe band", {})
    events = [drop(a, "activation", "scale_inv_min"), band, drop(b, "weight", "scale_inv_max", 410), worse]

    grouped = group_events(events)

    assert [(e.layer, e.kind) for e in grouped] == [(a, "scale_inv_drop"), (a, "band_crossing"), (b, "scale_inv_drop")]
    assert grouped[0] == events[0] and grouped[2] == events[2]  # a group of one is the event itself
    merged = grouped[1]
    # the iteration the worst member reached its severity; where the group began is in the detail
    assert (merged.severity, merged.tensor, merged.iteration, merged.value) == ("severe", "activation", 350, 4.5)
    assert merged.detail["first_iteration"] == 300 and "iterations 300–350" in merged.message
    assert [m["tensor"] for m in merged.detail["members"]] == ["activation", "gradient"]  # worst first
