"""Statistics lines and parses shared by the StatsLogParser tests (test_stats_log.py, test_stats_log_blocks.py,
test_stats_log_reference.py): metric names, the line header, the spec's line regex, a parse of whole files and the
series it read."""

from __future__ import annotations

import io
import math
import random
import re

from fp8_policy.policy.parse.stats_log import FileReport, ParsedStats, StatsLogParser
from tests.support.archives import TS, same_float, stats_line

NAME = "model.layers.1.self_attention.linear_qkv_activation_underflows%"
OTHER = "model.layers.1.self_attention.linear_qkv_gradient_underflows%"
HEADER = f"{TS} - INFO - "
BIG_BLOCK = 16 * 1024 * 1024


# fp8-log-format.md §1.2, verbatim: the property below holds the parser to the spec, not to its own copy.
SPEC_LINE = re.compile(
    r"^(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3}) - (?P<level>[A-Z]+) - "
    r"(?P<name>.+?)\s+iteration=(?P<iteration>\d+)\s+value=(?P<value>[-+]?(?:\d+(?:\.\d+)?|nan|inf))\s*$"
)


def parse(*files: bytes, **options) -> tuple[ParsedStats, list[FileReport]]:
    """Feed each bytes object as one file (session order) and finish."""
    parser = StatsLogParser(**options)
    reports = [parser.feed(io.BytesIO(data), f"file{k}.log") for k, data in enumerate(files)]
    return parser.finish(), reports


def as_dict(parsed: ParsedStats) -> dict[str, list[tuple[int, float]]]:
    return {
        name: list(zip(*(a.tolist() for a in parsed.series(k)), strict=True)) for k, name in enumerate(parsed.names)
    }


def assert_same_series(parsed: ParsedStats, expected: dict[str, dict[int, float]]) -> None:
    """Same names, iterations and values (NaN == NaN, -0.0 != 0.0) as a name -> {iteration: value} dict."""
    got = as_dict(parsed)
    assert sorted(got) == sorted(expected)
    for name, points in got.items():
        want = sorted(expected[name].items())
        assert [i for i, _ in points] == [i for i, _ in want], name
        mismatches = [(i, a, b) for (i, a), (_, b) in zip(points, want, strict=True) if not same_float(a, b)]
        assert mismatches == [], name


def lines(*texts: str, newline: str = "\n") -> bytes:
    return "".join(t + newline for t in texts).encode()


def _mixed_log() -> bytes:
    rng = random.Random(7)
    texts = []
    for it in range(0, 200, 10):
        for k in range(4):
            texts.append(stats_line(f"model.layers.{k}.fc1_activation_underflows%", it, round(rng.uniform(0, 5), 4)))
        texts.append(stats_line("model.fc2 with spaces_activation_min", it, -rng.random()))
        texts.append(["", "garbage line", "\x00\xff"][it // 10 % 3])
    texts.append(stats_line("model.layers.0.fc1_activation_underflows%", 0, math.nan))  # duplicate
    return lines(*texts, newline="\r\n")[:-2]  # no trailing newline
