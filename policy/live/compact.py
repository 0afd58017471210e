"""The compact JSON form of the live detectors' running state (policy/live/events.py `SeriesState`,
policy/live/scalar_events.py `ScalarState`), kept between pieces: one short key per field.

Belongs here: the encoder and decoder the states share. Each state class gives its own table of field ->
(key, reader); the reader turns the stored JSON value back into the field's type. A key missing from a stored
document reads as the field's default. Must not be here: any detector.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

State = TypeVar("State")
Reader = Callable[[Any], Any]
Keys = Mapping[str, tuple[str, Reader]]  # field name -> (its key in the stored document, its reader)


def as_stored(value: Any) -> Any:
    """The reader of a field stored as it is (a number, a string or None)."""
    return value


def rows(value: Any) -> list[list[Any]]:
    """The reader of a list of lists ([[iteration, value], ...])."""
    return [list(row) for row in value]


def lists_by_name(value: Any) -> dict[str, list[Any]]:
    """The reader of a name -> list mapping."""
    return {name: list(items) for name, items in value.items()}


def to_compact(state: Any, keys: Keys) -> dict[str, Any]:
    """`state`'s fields under their short keys, in the table's order (the values themselves, not copies)."""
    return {key: getattr(state, name) for name, (key, _read) in keys.items()}


def from_compact(cls: Callable[..., State], data: Mapping[str, Any], keys: Keys) -> State:
    """The state a `to_compact` document describes; a key it lacks gives the field's default."""
    return cls(**{name: read(data[key]) for name, (key, read) in keys.items() if key in data})
