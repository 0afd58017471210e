"""Tests for policy.parse.stats_log.StatsLogParser: every line rule of fp8-log-format.md §1.2 and duplicates (block
boundaries: test_stats_log_blocks.py; the real logs and the reference regex: test_stats_log_reference.py).
"""

from __future__ import annotations

import io
import math

import pytest

from fp8_policy.policy.parse.stats_log import FileReport, NoStatsLines, StatsLogParser
from tests.policy.parse.stats_lines import (
    HEADER,
    NAME,
    OTHER,
    SPEC_LINE,
    as_dict,
    assert_same_series,
    lines,
    parse,
)
from tests.support.archives import same_float, stats_line

# --- values and iterations -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.0000", 1.0),
        ("21.4681", 21.4681),
        ("0.0000", 0.0),
        ("-0.0000", -0.0),
        ("-2.6673", -2.6673),
        ("+1.5000", 1.5),
        ("7", 7.0),
        ("nan", math.nan),
        ("-nan", math.nan),
        ("inf", math.inf),
        ("-inf", -math.inf),
        ("+inf", math.inf),
        ("123456789012.3456", 123456789012.3456),
        ("0.12345678901234567890", 0.12345678901234567890),  # 21 digits: slow path, exact float()
        ("123456789012345678901234567890", 123456789012345678901234567890.0),
        ("9007199254740993", 9007199254740993.0),  # 2**53 + 1: not exact as mantissa / 10**k
    ],
)
def test_value_equals_python_float_of_the_text(text: str, expected: float) -> None:
    parsed, (report,) = parse(lines(f"{HEADER}{NAME} \t\t\t\t iteration=000010 \t\t\t\t value={text}"))

    ((_, ((iteration, value),)),) = as_dict(parsed).items()
    assert iteration == 10
    assert same_float(value, float(text)) and same_float(value, expected)
    assert (report.stats_lines, report.skipped_lines) == (1, 0)


def test_negative_zero_keeps_its_sign() -> None:
    parsed, _ = parse(lines(stats_line(NAME, 0, -0.0), stats_line(NAME, 1, 0.0)))

    values = parsed.values.tolist()
    assert values == [0.0, 0.0]
    assert [math.copysign(1.0, v) for v in values] == [-1.0, 1.0]


@pytest.mark.parametrize("iteration", [0, 999_999, 1_000_000, 1_234_567, 9_999_999, 123_456_789_012])
def test_iterations_of_any_length(iteration: int) -> None:
    parsed, _ = parse(lines(stats_line(NAME, iteration, 1.5)))

    assert parsed.iterations.tolist() == [iteration]


def test_seven_digit_iterations_sort_after_six_digit_ones() -> None:
    data = lines(stats_line(NAME, 1_000_000, 2.0), stats_line(NAME, 999_990, 1.0), stats_line(NAME, 1_000_010, 3.0))

    parsed, _ = parse(data)

    assert as_dict(parsed) == {NAME: [(999_990, 1.0), (1_000_000, 2.0), (1_000_010, 3.0)]}
    assert parsed.duplicated_points == 0


@pytest.mark.parametrize(
    ("iteration", "stored"),
    [
        ("9223372036854775807", True),
        ("09223372036854775807", True),
        ("9223372036854775808", False),
        ("99999999999999999999", False),
    ],
    ids=["int64-max", "int64-max-zero-padded", "int64-max+1", "20-digits"],
)
def test_iteration_beyond_int64_is_a_skipped_line(iteration: str, stored: bool) -> None:
    big = f"{HEADER}{NAME} \t\t\t\t iteration={iteration} \t\t\t\t value=1.0000"

    parsed, (report,) = parse(lines(stats_line(NAME, 0, 1.0), big))

    assert (report.stats_lines, report.skipped_lines) == ((2, 0) if stored else (1, 1))
    assert as_dict(parsed) == {NAME: [(0, 1.0), *([(int(iteration), 1.0)] if stored else [])]}
    assert report.skipped_samples == ([] if stored else [f"line 2: {big!r}"])


# --- line endings, blank and garbage lines ------------------------------------------------------------


def test_crlf_lines_parse_like_lf_lines() -> None:
    texts = [stats_line(NAME, i, i / 10) for i in range(5)] + [stats_line(OTHER, 0, math.nan)]

    crlf, (crlf_report,) = parse(lines(*texts, newline="\r\n"))
    lf, _ = parse(lines(*texts))

    assert_same_series(crlf, {k: dict(v) for k, v in as_dict(lf).items()})
    assert crlf_report == FileReport("file0.log", lines_read=6, stats_lines=6)


def test_blank_lines_are_counted_not_skipped() -> None:
    data = lines("", stats_line(NAME, 0, 1.0), "   ", "\t", stats_line(NAME, 10, 2.0), "", newline="\r\n")

    parsed, (report,) = parse(data)

    assert report == FileReport("file0.log", lines_read=6, stats_lines=2, blank_lines=4)
    assert as_dict(parsed) == {NAME: [(0, 1.0), (10, 2.0)]}


def test_garbage_lines_are_counted_with_numbered_samples() -> None:
    garbage = [
        "Traceback (most recent call last):",
        f"{HEADER}Reading config from ./fp8_stats.yaml.",
        f"{HEADER}{NAME} iteration=abc value=1.0",
        f"{HEADER}{NAME} iteration=1 value=1.",
        f"{HEADER}{NAME} iteration=1 value=NaN",
        "x" * 500,
    ]
    data = lines(stats_line(NAME, 0, 1.0), *garbage, stats_line(NAME, 10, 2.0))

    parsed, (report,) = parse(data)

    assert report.lines_read == 8
    assert (report.stats_lines, report.skipped_lines, report.blank_lines) == (2, 6, 0)
    assert report.skipped_samples == [f"line {n}: {text[:200]!r}" for n, text in enumerate(garbage[:5], start=2)]
    assert as_dict(parsed) == {NAME: [(0, 1.0), (10, 2.0)]}


def test_binary_garbage_lines_are_skipped() -> None:
    data = (
        lines(stats_line(NAME, 0, 1.0))
        + b"\x00\xff\xfe\x80 binary \x9c\n"
        + b"\x1f\x8b\x08\x00\n"
        + lines(stats_line(NAME, 10, 2.0))
    )

    parsed, (report,) = parse(data)

    assert (report.lines_read, report.stats_lines, report.skipped_lines) == (4, 2, 2)
    assert report.skipped_samples[0].startswith("line 2: '\\x00")
    assert as_dict(parsed) == {NAME: [(0, 1.0), (10, 2.0)]}


@pytest.mark.parametrize(
    ("data", "lines_read"),
    [
        (b"", 0),
        (b"\n\n  \n", 3),
        (b"hello\nworld\n", 2),
        (f"{HEADER}Reading config from ./fp8_stats.yaml.\n".encode(), 1),
    ],
)
def test_file_without_stats_line_raises_no_stats_lines(data: bytes, lines_read: int) -> None:
    parser = StatsLogParser()

    with pytest.raises(NoStatsLines) as caught:
        parser.feed(io.BytesIO(data), "rank_0/stats.log")

    assert str(caught.value) == f"rank_0/stats.log: no statistics line in {lines_read} lines"


def test_last_line_without_newline_is_parsed() -> None:
    data = lines(stats_line(NAME, 0, 1.0)) + stats_line(NAME, 10, 2.5).encode()

    parsed, (report,) = parse(data)

    assert as_dict(parsed) == {NAME: [(0, 1.0), (10, 2.5)]}
    assert report == FileReport("file0.log", lines_read=2, stats_lines=2)


# --- names ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "model.fc1 activation min",  # spaces
        "model.décodeur.fc1_activation_min",  # UTF-8
        "a",
        "model.layers.1.mlp.fc1_activation_mxfp8_underflows%_columnwise",
    ],
)
def test_names_beyond_the_fast_path(name: str) -> None:
    parsed, (report,) = parse(lines(stats_line(name, 20, 3.25)))

    assert as_dict(parsed) == {name: [(20, 3.25)]}
    assert report.skipped_lines == 0


@pytest.mark.parametrize(
    "line",
    [
        f"{HEADER}{NAME}  \t\t\t\t iteration=000000 \t\t\t\t value=1.0000",  # extra space before the separator
        f"{HEADER}{NAME}\t \t\t\t\t iteration=000000 \t\t\t\t value=1.0000",
        f"{HEADER}{NAME}   iteration=0   value=1.0",
        f"{HEADER}{NAME}\titeration=0\tvalue=1.0\t ",
    ],
)
def test_whitespace_around_the_name_is_not_part_of_it(line: str) -> None:
    parsed, _ = parse(lines(line))

    assert SPEC_LINE.match(line)["name"] == NAME
    assert parsed.names == [NAME]


# --- duplicates ---------------------------------------------------------------------------------------------


def test_duplicates_within_one_file_last_wins() -> None:
    first = [stats_line(NAME, i, 1.0) for i in (0, 10, 20)]
    second = [stats_line(NAME, i, 2.0) for i in (10, 20, 30)]  # appended session in the same file

    parsed, (report,) = parse(lines(*first, *second))

    assert as_dict(parsed) == {NAME: [(0, 1.0), (10, 2.0), (20, 2.0), (30, 2.0)]}
    assert parsed.duplicated_points == 2
    assert report.stats_lines == 6


def test_duplicates_across_two_feeds_last_feed_wins() -> None:
    older = lines(*(stats_line(n, i, 1.0) for i in (0, 10, 20) for n in (NAME, OTHER)))
    newer = lines(*(stats_line(NAME, i, 2.0) for i in (20, 30)))

    parsed, reports = parse(older, newer)

    assert as_dict(parsed) == {
        NAME: [(0, 1.0), (10, 1.0), (20, 2.0), (30, 2.0)],
        OTHER: [(0, 1.0), (10, 1.0), (20, 1.0)],
    }
    assert parsed.duplicated_points == 1
    assert [r.stats_lines for r in reports] == [6, 2]


def test_a_session_that_restarts_at_zero_is_placed_after_the_earlier_one() -> None:
    # A resumed run whose debug API counts from 0 again: last-wins merging would let session 1 (0..40) overwrite
    # the 12 % the second session shows at its iterations 0..20, and the late problem would vanish.
    first = lines(*(stats_line(n, i, 0.1) for i in range(0, 50, 10) for n in (NAME, OTHER)))
    second = lines(*(stats_line(NAME, i, 12.0) for i in range(0, 30, 10)))

    parsed, reports = parse(first, second)

    assert as_dict(parsed)[NAME] == [(i, 0.1) for i in range(0, 50, 10)] + [(41 + i, 12.0) for i in (0, 10, 20)]
    assert as_dict(parsed)[OTHER] == [(i, 0.1) for i in range(0, 50, 10)]
    assert parsed.duplicated_points == 0
    assert [r.iteration_offset for r in reports] == [0, 41]


def test_a_third_session_restarting_again_follows_the_second() -> None:
    sessions = [lines(*(stats_line(NAME, i, float(k)) for i in (0, 10))) for k in range(3)]

    parsed, reports = parse(*sessions)

    assert as_dict(parsed)[NAME] == [(0, 0.0), (10, 0.0), (11, 1.0), (21, 1.0), (22, 2.0), (32, 2.0)]
    assert [r.iteration_offset for r in reports] == [0, 11, 22]


def test_duplicate_nan_replaced_by_a_later_value() -> None:
    parsed, _ = parse(
        lines(
            stats_line(NAME, 5, math.nan),
            stats_line(NAME, 5, 4.0),
            stats_line(NAME, 6, 1.0),
            stats_line(NAME, 6, math.inf),
        )
    )

    assert as_dict(parsed) == {NAME: [(5, 4.0), (6, math.inf)]}
    assert parsed.duplicated_points == 2


# --- blocks and over-long lines -------------------------------------------------------------------------------


# --- the real logs --------------------------------------------------------------------------------------------


# --- property: fast path == reference regex, point for point ----------------------------------------------------
