"""Tests for policy.parse.stats_log.StatsLogParser: every line rule of fp8-log-format.md §1.2, block boundaries,
duplicates, the real bionemo logs, and the compiled fast path against the reference regex (seeded random logs).
"""

from __future__ import annotations

import io
import math
import random
import re
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fp8_policy.policy.parse.stats_log import STATS_LINE, FileReport, NoStatsLines, ParsedStats, StatsLogParser
from tests.support.archives import ESM2_STATS, LLAMA3_STATS, TS, parse_reference, same_float, stats_line

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


# --- the real logs --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "n_lines", "n_names"), [(ESM2_STATS, 1800, 72), (LLAMA3_STATS, 600, 24)], ids=["esm2", "llama3"]
)
def test_real_bionemo_logs_every_line_parsed_like_the_reference_regex(path: Path, n_lines: int, n_names: int) -> None:
    parsed, (report,) = parse(path.read_bytes())

    assert report == FileReport("file0.log", lines_read=n_lines, stats_lines=n_lines)
    assert len(parsed.names) == n_names
    assert parsed.points == n_lines
    assert parsed.duplicated_points == 0
    assert_same_series(parsed, parse_reference(path))


def test_real_log_fed_as_two_halves_equals_one_feed() -> None:
    data = ESM2_STATS.read_bytes()
    cut = data.index(b"\n", len(data) // 2) + 1

    parsed, reports = parse(data[:cut], data[cut:], block_bytes=4096)

    assert sum(r.stats_lines for r in reports) == 1800
    assert_same_series(parsed, parse_reference(ESM2_STATS))


# --- property: fast path == reference regex, point for point ----------------------------------------------------

_NAMES = [
    "model.layers.1.self_attention.layernorm_qkv_activation_underflows%",
    "model.layers.1.self_attention.layernorm_qkv_gradient_scale_inv_min",
    "model.layers.2.mlp.fc1_weight_mxfp8_underflows%_columnwise",
    "model.lm_head_activation_max",
    "model.fc1 spaced name_activation_min",
    "modèle.fc1_activation_min",
]


def _random_value(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.55:
        return f"{rng.uniform(-10, 100):.4f}"
    if kind < 0.65:
        return rng.choice(["nan", "inf", "-inf", "-0.0000", "0.0000", "-nan", "+inf"])
    if kind < 0.75:
        return str(rng.randrange(0, 10 ** rng.randrange(1, 19)))
    if kind < 0.85:
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 25)))
        return f"{rng.choice(['', '-', '+'])}{rng.randrange(0, 1000)}.{digits}"
    return f"{rng.uniform(0, 1e6):.{rng.randrange(1, 8)}f}"


def _random_line(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.05:
        return rng.choice(["", " ", "\t \t"])
    if kind < 0.12:
        return rng.choice(
            [
                "garbage",
                f"{HEADER}Reading config from x.yaml.",
                f"{HEADER}{_NAMES[0]} iteration= value=1",
                f"{HEADER}{_NAMES[0]} iteration=1 value=",
                f"{HEADER}{_NAMES[0]} iteration=1 value=1.5x",
                f"{TS} - info - {_NAMES[0]} iteration=1 value=1",
                f"{HEADER}{_NAMES[0]}iteration=1 value=1",
                "\x00\x01\x02",
                f"{HEADER} iteration=1 value=2",
            ]
        )
    name = rng.choice(_NAMES)
    iteration = rng.choice([rng.randrange(0, 300), rng.randrange(10**6, 10**7), rng.randrange(0, 10**12)])
    it_text = f"{iteration:06d}" if rng.random() < 0.8 else str(iteration)
    sep1, sep2 = (" \t\t\t\t ", " \t\t\t\t ") if rng.random() < 0.7 else (rng.choice([" ", "\t", "  \t"]),) * 2
    tail = rng.choice(["", "", "", " ", "\t", " \r"])
    level = rng.choice(["INFO", "INFO", "INFO", "WARNING"])
    return f"{TS} - {level} - {name}{sep1}iteration={it_text}{sep2}value={_random_value(rng)}{tail}"


def _reference_parse(data: bytes) -> tuple[dict[str, dict[int, float]], FileReport]:
    """The spec's reading: split on LF, strip one CR, regex + int()/float(), blank = only spaces/tabs/CR."""
    report = FileReport("file0.log")
    out: dict[str, dict[int, float]] = {}
    pieces = data.split(b"\n")
    if pieces and pieces[-1] == b"":
        pieces.pop()
    for number, raw in enumerate(pieces, start=1):
        report.lines_read += 1
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        if not raw.strip(b" \t\r\x0b\x0c"):
            report.blank_lines += 1
            continue
        match = SPEC_LINE.match(text)
        if match is None:
            report.skipped_lines += 1
            if len(report.skipped_samples) < 5:
                report.skipped_samples.append(f"line {number}: {text[:200]!r}")
            continue
        report.stats_lines += 1
        out.setdefault(match["name"], {})[int(match["iteration"])] = float(match["value"])
    return out, report


@pytest.mark.parametrize("seed", range(12))
def test_random_logs_fast_path_equals_reference_regex(seed: int) -> None:
    rng = random.Random(seed)
    texts = [_random_line(rng) for _ in range(rng.randrange(50, 400))]
    data = lines(*texts, newline=rng.choice(["\n", "\r\n"]))
    if rng.random() < 0.5:
        data = data.rstrip(b"\r\n")
    expected, expected_report = _reference_parse(data)

    for block_bytes in (BIG_BLOCK, rng.randrange(16, 400)):
        parsed, (report,) = parse(data, block_bytes=block_bytes, workers=2)

        assert report == expected_report
        assert_same_series(parsed, expected)
        n_points = sum(len(v) for v in expected.values())
        assert parsed.points == n_points
        assert parsed.duplicated_points == expected_report.stats_lines - n_points


_EDIT_BYTES = b" \t\r\n-+.,0123456789=:aeinuvxT"


def _single_byte_edits(line: bytes) -> Iterator[bytes]:
    """Every deletion, and every replacement and insertion of an _EDIT_BYTES byte, at every position of `line`."""
    for at in range(len(line) + 1):
        if at < len(line):
            yield line[:at] + line[at + 1 :]
        for byte in _EDIT_BYTES:
            yield line[:at] + bytes([byte]) + line[at:]
            if at < len(line) and line[at] != byte:
                yield line[:at] + bytes([byte]) + line[at + 1 :]


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("value", ["12.3456", "-0.5000"])
def test_every_single_byte_edit_of_a_predicted_line_reads_like_the_reference(newline: str, value: str) -> None:
    """The scanner predicts each line's name from the name order seen so far and reads the rest of the line
    forwards (kernel.scan_block): here the predicted line, between two lines that keep the cycle going, is
    edited in every way one byte can, and every edit must read exactly as the spec's regex reads it."""
    first, edited, last = _NAMES[0], _NAMES[1], _NAMES[2]
    line = f"{HEADER}{edited} \t\t\t\t iteration=000007 \t\t\t\t value={value}".encode()
    cycles = [lines(*(stats_line(name, 0, 1.0) for name in (first, edited, last)), newline=newline)]
    for iteration, variant in enumerate(_single_byte_edits(line), start=1):
        variant = variant.replace(b"000007", b"%06d" % iteration, 1)  # each variant its own point where it parses
        cycles.append(
            stats_line(first, iteration, 2.0).encode()
            + newline.encode()
            + variant
            + newline.encode()
            + stats_line(last, iteration, 3.0).encode()
            + newline.encode()
        )
    data = b"".join(cycles)
    expected, expected_report = _reference_parse(data)
    assert len(cycles) > 3000 and len(expected[edited]) > 100  # the edits that still parse are many

    parsed, (report,) = parse(data, block_bytes=BIG_BLOCK, workers=2)

    assert report == expected_report
    assert_same_series(parsed, expected)


@pytest.mark.parametrize("seed", range(4))
def test_product_regex_agrees_with_the_spec_regex(seed: int) -> None:
    rng = random.Random(seed)
    texts = [_random_line(rng) for _ in range(2000)]
    texts += [f"{HEADER}{' ' * k}iteration=1 value=2" for k in range(4)] + [f"{HEADER}a {' ' * 3}b iteration=1 value=2"]

    for text in texts:
        ours, spec = STATS_LINE.match(text), SPEC_LINE.match(text)
        assert (ours and ours.groupdict()) == (spec and spec.groupdict()), text


def test_parsed_arrays_are_sorted_and_typed() -> None:
    parsed, _ = parse(_mixed_log())

    assert parsed.iterations.dtype == np.int64 and parsed.values.dtype == np.float64
    for k in range(len(parsed.names)):
        its, _ = parsed.series(k)
        assert np.all(np.diff(its) > 0)
