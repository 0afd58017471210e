"""How `make test` spreads the suite over pytest-xdist workers (https://pytest-xdist.readthedocs.io).

The unit of work is a test module, except tests/browser, which is one unit: a module's tests share its
module-scoped fixtures and sometimes module-level state (tests/service/hardening/test_openapi_fuzz.py's last test checks
what the fuzz test before it saw), and the browser tests share one served app, one Chromium and one screenshot
folder (tests/browser/conftest.py). The longest unit, tests/test_wheel.py (two clean venvs: minutes when no
template venv is cached, as in CI), is handed out first, then the other units that hold a test marked `slow`
(the closed loop, the scale-out cluster, the live uploads), so the long ones overlap the many short ones instead
of starting last; the rest keep their collection order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import pytest
from xdist.scheduler import LoadScopeScheduling

BROWSER = "tests/browser"
FIRST = "tests/test_wheel.py"


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its module's path, or tests/browser for every browser test."""
    path = nodeid.split("::", 1)[0]
    return BROWSER if path.startswith(BROWSER + "/") else path


def long_units_first(items: Iterable[pytest.Item]) -> list[pytest.Item]:
    """The items: FIRST's, then those of units holding a `slow` test, then the rest; each part in the given order."""
    items = list(items)
    long = {unit_of(item.nodeid) for item in items if item.get_closest_marker("slow")}

    def rank(item: pytest.Item) -> int:
        unit = unit_of(item.nodeid)
        return 0 if unit == FIRST else 1 if unit in long else 2

    return sorted(items, key=rank)


def unique_nodeids(items: Iterable[pytest.Item]) -> None:
    """Give items that share a node id one of their own (`<parent>::<name>`).

    Schemathesis' items (one per API operation) all carry the test function's node id under pytest 9, and xdist
    finds the item to run by its node id: every worker would run the first operation over and over. The name
    holds the operation (`test_x[GET /api/v1/runs]`), so reports say which one failed, with or without xdist.
    """
    items = list(items)
    counts = Counter(item.nodeid for item in items)
    for item in items:
        if counts[item.nodeid] > 1:
            nodeid = f"{item.nodeid.rsplit('::', 1)[0]}::{item.name}"
            if hasattr(item, "_id"):  # pytest >= 9 keeps it parsed (_pytest/nodeid.py)
                item._id = type(item._id).parse(nodeid)
            else:
                item._nodeid = nodeid


class ModuleScheduling(LoadScopeScheduling):
    """xdist's loadscope scheduling over `unit_of`, in collection order (not reordered by test count)."""

    def __init__(self, config: pytest.Config, log=None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False  # the workers already put the long units first

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)
