"""Tests for policy.parse.stats_log.StatsLogParser: block boundaries (any block size and worker count gives the same
result) and over-long lines (dropped and counted, also across blocks), in linear time on pathological whitespace.
"""

from __future__ import annotations

import time

import pytest

from fp8_policy.policy.parse.stats_log import FileReport
from tests.policy.parse.stats_lines import (
    BIG_BLOCK,
    HEADER,
    NAME,
    OTHER,
    _mixed_log,
    as_dict,
    assert_same_series,
    lines,
    parse,
)
from tests.support.archives import stats_line


@pytest.mark.parametrize("block_bytes", [7, 64, 1000])
@pytest.mark.parametrize("workers", [1, 3])
def test_tiny_blocks_give_the_same_result_as_one_big_block(block_bytes: int, workers: int) -> None:
    data = _mixed_log()
    reference, (ref_report,) = parse(data, block_bytes=BIG_BLOCK, workers=1)

    parsed, (report,) = parse(data, block_bytes=block_bytes, workers=workers)

    assert report == ref_report
    assert parsed.duplicated_points == reference.duplicated_points == 1
    assert_same_series(parsed, {k: dict(v) for k, v in as_dict(reference).items()})
    assert report.skipped_lines == 13 and report.blank_lines == 7


def test_a_block_of_many_short_lines_is_scanned_whole() -> None:
    """Scratch sets are sized for lines of usual length; a block of far shorter ones continues in larger sets."""
    texts = []
    for it in range(400):
        texts += [stats_line(NAME, it, it / 8), *([""] * 40), "x", stats_line(OTHER, it, -it / 4)]
    data = lines(*texts)

    parsed, (report,) = parse(data, block_bytes=BIG_BLOCK, workers=2)

    assert (report.lines_read, report.stats_lines, report.blank_lines, report.skipped_lines) == (17200, 800, 16000, 400)
    assert_same_series(parsed, {NAME: {it: it / 8 for it in range(400)}, OTHER: {it: -it / 4 for it in range(400)}})


@pytest.mark.parametrize("block_bytes", [7, 64, 1000])
def test_line_longer_than_max_line_bytes_across_blocks_is_dropped_and_counted(block_bytes: int) -> None:
    data = lines(stats_line(NAME, 0, 1.0), f"{HEADER}{'x' * 5000}", stats_line(NAME, 10, 2.0))

    parsed, (report,) = parse(data, block_bytes=block_bytes, max_line_bytes=300)

    assert report == FileReport(
        "file0.log",
        lines_read=3,
        stats_lines=2,
        skipped_lines=1,
        skipped_samples=["line 2: longer than 300 bytes, dropped"],
    )
    assert as_dict(parsed) == {NAME: [(0, 1.0), (10, 2.0)]}


def test_over_long_last_line_without_newline_is_dropped() -> None:
    data = lines(stats_line(NAME, 0, 1.0)) + b"y" * 5000

    parsed, (report,) = parse(data, block_bytes=64, max_line_bytes=300)

    assert (report.lines_read, report.stats_lines, report.skipped_lines) == (2, 1, 1)
    assert report.skipped_samples == ["line 2: longer than 300 bytes, dropped"]


def test_line_longer_than_max_line_bytes_inside_one_block_is_dropped_too() -> None:
    data = lines(stats_line(NAME, 0, 1.0), f"{HEADER}{'x' * 5000}", stats_line(NAME, 10, 2.0))

    parsed, (report,) = parse(data, block_bytes=BIG_BLOCK, max_line_bytes=300)

    assert report.skipped_samples == ["line 2: longer than 300 bytes, dropped"]


def test_slow_path_is_linear_on_pathological_whitespace() -> None:
    parse(lines(stats_line(NAME, 0, 1.0)))  # compiled kernels loaded: time only the line below
    line = f"{HEADER}a{' ' * 20_000}b iteration=1 value=2x"  # not a stats line: the regex has to say so
    start = time.perf_counter()

    parsed, (report,) = parse(lines(stats_line(NAME, 0, 1.0), line))

    elapsed = time.perf_counter() - start
    assert (report.stats_lines, report.skipped_lines) == (1, 1)
    assert elapsed < 0.1, f"{elapsed:.2f} s for one 20 kB line"
