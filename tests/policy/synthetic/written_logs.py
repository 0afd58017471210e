"""Reading back what policy/synthetic/ wrote, for its tests: the lines of a file, the series of a written run by
(rank, name), and the reference patterns of a statistics line and of a metric name."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from fp8_policy.policy.synthetic import (
    WrittenRun,
)

# Reference regexes, verbatim from fp8-log-format.md §1.2, §1.3 and §3.
STATS_LINE = re.compile(
    r"^(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3}) - (?P<level>[A-Z]+) - "
    r"(?P<name>.+?)\s+iteration=(?P<iteration>\d+)\s+value=(?P<value>[-+]?(?:\d+(?:\.\d+)?|nan|inf))\s*$"
)
METRIC = re.compile(r"^(?P<layer>.+)_(?P<tensor>activation|gradient|weight|output|wgrad|dgrad)_(?P<stat>.+)$")


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _series(written: WrittenRun) -> dict[tuple[int, str], np.ndarray]:
    values: dict[tuple[int, str], list[float]] = defaultdict(list)
    for f in written.files:
        for line in _lines(f.stats_path):
            m = STATS_LINE.match(line)
            assert m, line
            values[(f.rank, m["name"])].append(float(m["value"]))
    return {key: np.array(v) for key, v in values.items()}
