"""Query parameters of the heatmap and compare endpoints, validated by hand so that every bad value is a 400
`{"error", "detail"}` (FastAPI's own coercion would answer 422)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar, overload

from fp8_policy.policy.thresholds import Thresholds
from fp8_policy.policy.vocabulary import DEFAULT_BOXES
from fp8_policy.service.errors import InvalidParameter, InvalidThresholds, UnknownParameter
from fp8_policy.service.limits import MAX_ITERATION, check_filters, check_rank

N = TypeVar("N", int, float)

MAX_DPI, MIN_DPI = 600, 20
MAX_BOXES = 50
THRESHOLD_KEYS = ("warning", "critical", "severe")
HEATMAP_KEYS = frozenset(
    {
        "tensor",
        "stat",
        "rank",
        "sublayer",
        "vmax",
        "dpi",
        "mark_iteration",
        "width",
        "height",
        "show_skip",
        "boxes",
        *THRESHOLD_KEYS,
    }
)
MAX_CELL_COLUMNS = 2000
_TRUE, _FALSE = frozenset({"1", "true", "yes", "on"}), frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True, slots=True)
class HeatmapParams:
    tensor: str = "gradient"
    stat: str = "underflows%"  # the stat as logged after the tensor (recipe prefix / _columnwise included)
    rank: int | None = None  # None: max over ranks per iteration
    sublayer: str | None = None  # one sublayer: one row per block
    vmax: float | None = None  # None: 6 % for percentage stats, the data maximum otherwise
    dpi: int = 150
    mark_iteration: int | None = None
    width: float | None = None  # inches
    height: float | None = None  # inches
    show_skip: bool = True
    boxes: int = DEFAULT_BOXES
    thresholds: Thresholds = field(default_factory=Thresholds)
    threshold_overrides: tuple[tuple[str, float], ...] = ()  # as given, for the recommendation (hashable)


def parse_heatmap_params(
    query: Mapping[str, str], *, show_skip: bool = True, allowed: frozenset[str] = HEATMAP_KEYS
) -> HeatmapParams:
    unknown = sorted(set(query) - allowed)
    if unknown:
        raise UnknownParameter(f"unknown parameter(s): {', '.join(unknown)}; expected: {', '.join(sorted(allowed))}")
    dpi = _int(query, "dpi", 150, low=MIN_DPI)
    if dpi > MAX_DPI:
        raise InvalidParameter(f"dpi must be at most {MAX_DPI}, got {dpi}")
    overrides = parse_threshold_overrides(query)
    mark_iteration = _int(query, "mark_iteration", None, low=0)
    if mark_iteration is not None and mark_iteration > MAX_ITERATION:
        raise InvalidParameter(
            f"mark_iteration must be at most {MAX_ITERATION} (an iteration), got {str(mark_iteration)[:30]}..."
        )
    return HeatmapParams(
        tensor=_text(query, "tensor", "gradient"),
        stat=_text(query, "stat", "underflows%"),
        rank=check_rank(_int(query, "rank", None, low=0)),
        sublayer=_text(query, "sublayer", None),
        vmax=_float(query, "vmax", None, positive=True),
        dpi=dpi,
        mark_iteration=mark_iteration,
        width=_float(query, "width", None, positive=True),
        height=_float(query, "height", None, positive=True),
        show_skip=_bool(query, "show_skip", show_skip),
        boxes=min(_int(query, "boxes", DEFAULT_BOXES, low=0) or 0, MAX_BOXES),
        thresholds=thresholds_of(overrides),
        threshold_overrides=tuple(sorted(overrides.items())),
    )


def parse_cell_columns(query: Mapping[str, str]) -> int:
    """`cells`: how many value columns heatmap.json carries (0, the default: none; at most MAX_CELL_COLUMNS)."""
    columns = _int(query, "cells", 0, low=0) or 0
    if columns > MAX_CELL_COLUMNS:
        raise InvalidParameter(f"cells must be at most {MAX_CELL_COLUMNS}, got {columns}")
    return columns


def parse_threshold_overrides(query: Mapping[str, str]) -> dict[str, float]:
    return {key: _float(query, key, 0.0) for key in THRESHOLD_KEYS if key in query}


def thresholds_of(overrides: Mapping[str, float]) -> Thresholds:
    try:
        return Thresholds.from_overrides(dict(overrides))
    except ValueError as exc:
        raise InvalidThresholds(str(exc)) from exc


def run_id_param(query: Mapping[str, str], name: str) -> int:
    if name not in query:
        raise InvalidParameter(f"missing parameter {name!r} (a run id)")
    value = _int(query, name, 0, low=1)
    assert value is not None
    return value


@overload
def _text(query: Mapping[str, str], name: str, default: str) -> str: ...
@overload
def _text(query: Mapping[str, str], name: str, default: None) -> str | None: ...
def _text(query: Mapping[str, str], name: str, default: str | None) -> str | None:
    value = query.get(name)
    if value is None:
        return default
    value = value.strip()
    if not value or len(value) > 200:
        raise InvalidParameter(f"{name} must be 1-200 characters")
    check_filters(**{name: value})  # no NUL or control characters: compared with stored names in SQL
    return value


@overload
def _int(query: Mapping[str, str], name: str, default: int, *, low: int) -> int: ...
@overload
def _int(query: Mapping[str, str], name: str, default: None, *, low: int) -> int | None: ...
def _int(query: Mapping[str, str], name: str, default: int | None, *, low: int) -> int | None:
    value = _number(query, name, int, "an integer")
    if value is None:
        return default
    if value < low:
        raise InvalidParameter(f"{name} must be >= {low}, got {value}")
    return value


@overload
def _float(query: Mapping[str, str], name: str, default: float, *, positive: bool = False) -> float: ...
@overload
def _float(query: Mapping[str, str], name: str, default: None, *, positive: bool = False) -> float | None: ...
def _float(query: Mapping[str, str], name: str, default: float | None, *, positive: bool = False) -> float | None:
    value = _number(query, name, float, "a number")
    if value is None:
        return default
    if not math.isfinite(value) or (positive and value <= 0):
        raise InvalidParameter(f"{name} must be a finite{' positive' if positive else ''} number, got {query[name]!r}")
    return value


def _number(query: Mapping[str, str], name: str, convert: Callable[[str], N], what: str) -> N | None:
    """The parameter `name` read with `convert` (blanks around it ignored), None when absent; 400 when unreadable."""
    raw = query.get(name)
    if raw is None:
        return None
    try:
        return convert(raw.strip())
    except ValueError:
        raise InvalidParameter(f"{name} must be {what}, got {raw!r}") from None


def _bool(query: Mapping[str, str], name: str, default: bool) -> bool:
    raw = query.get(name)
    if raw is None:
        return default
    if raw.strip().lower() in _TRUE:
        return True
    if raw.strip().lower() in _FALSE:
        return False
    raise InvalidParameter(f"{name} must be true or false, got {raw!r}")
