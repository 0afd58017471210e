"""Property-based tests of the statistics-log parser (issue 9, "find the next ones before users do").

* Arbitrary bytes, fed with any block size, line limit and thread count, only ever raise the documented
  StatsLogError subclasses, and every line is accounted for: lines_read = stats + blank + skipped.
* Arbitrary well-formed logs (stats lines of any grammar-conforming name, any int64 iteration, any printed value,
  mixed with blank and garbage lines, LF or CRLF, appended sessions) parse to exactly what the reference regex
  reads (last line wins), with every line counted in the right bucket and every duplicate counted.
Budget: tests/support/fuzz.py (FP8_POLICY_FUZZ_EXAMPLES for longer runs).
"""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fp8_policy.policy.parse.stats_log import STATS_LINE, StatsLogError, StatsLogParser
from tests.support.archives import TS
from tests.support.fuzz import fuzz

INT64_MAX = 2**63 - 1

parser_options = st.fixed_dictionaries(
    {
        "block_bytes": st.integers(16, 4096),
        "max_line_bytes": st.integers(8, 600),
        "workers": st.integers(1, 3),
    }
)


def line_count(data: bytes) -> int:
    """Lines as the parser counts them: newline-terminated ones, plus a last one without a newline."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def parse(data: bytes, options: dict):
    parser = StatsLogParser(**options)
    report = parser.feed(io.BytesIO(data), "fuzz.log")
    return report, parser.finish()


def parse_counting_every_line(data: bytes, options: dict):
    """(report, parsed), having checked that every line is counted once: lines_read = stats + blank + skipped;
    None when the parser refused the data with a documented StatsLogError."""
    try:
        report, parsed = parse(data, options)
    except StatsLogError:
        return None
    assert report.lines_read == line_count(data)
    assert report.lines_read == report.stats_lines + report.blank_lines + report.skipped_lines
    return report, parsed


@fuzz(300)
@given(data=st.binary(max_size=3000), options=parser_options)
def test_arbitrary_bytes_raise_only_documented_errors_and_every_line_is_counted(data: bytes, options: dict) -> None:
    counted = parse_counting_every_line(data, options)
    if counted is None:
        return
    report, parsed = counted
    assert parsed.points == report.stats_lines - parsed.duplicated_points
    assert len(parsed.names) == parsed.offsets.shape[0] - 1
    for k in range(len(parsed.names)):
        iterations, _values = parsed.series(k)
        assert iterations.shape[0] > 0 and (np.diff(iterations) > 0).all()


@fuzz(200)
@given(
    lines=st.lists(
        st.one_of(
            st.binary(max_size=80),
            st.sampled_from(
                [
                    b"",
                    b"\r",
                    b"   \t",
                    b"iteration=1 value=2",
                    TS.encode() + b" - INFO - x iteration=1 value=",
                    TS.encode() + b" - INFO - a_b_c \t iteration=99999999999999999999 \t value=1.0",
                ]
            ),
        ),
        max_size=40,
    ),
    options=parser_options,
)
def test_near_miss_lines_raise_only_documented_errors(lines: list[bytes], options: dict) -> None:
    parse_counting_every_line(b"\n".join(lines), options)


# --- well-formed logs --------------------------------------------------------------------------------------------

_word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=8)
layer_names = st.builds(lambda parts: "model." + ".".join(parts), st.lists(_word, min_size=1, max_size=4))
metric_names = st.builds(
    lambda layer, tensor, stat: f"{layer}_{tensor}_{stat}",
    layer_names,
    st.sampled_from(["activation", "gradient", "weight"]),
    st.sampled_from(
        ["underflows%", "overflows%", "scale_inv_min", "scale_inv_max", "mse", "mxfp8_underflows%_columnwise"]
    ),
)
values = st.one_of(
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False).map(lambda v: f"{v:.4f}"),
    st.sampled_from(["nan", "inf", "-inf", "0", "-0.0000", "+1.5", "12"]),
)
stats_lines = st.builds(
    lambda name, iteration, value, digits: (
        f"{TS} - INFO - {name} \t\t\t\t iteration={iteration:0{digits}d} \t\t\t\t value={value}"
    ),
    metric_names,
    st.integers(0, INT64_MAX),
    values,
    st.integers(1, 8),
)
blank_lines = st.sampled_from(["", " ", "\t", "   \t  "])
garbage_lines = st.one_of(
    st.sampled_from(
        [
            f"{TS} - INFO - Assigned layer name: model.x",
            "Traceback (most recent call last):",
            "# comment",
            f"{TS} - WARNING - something happened",
        ]
    ),
    st.text(alphabet="abcdefgh #:-", min_size=1, max_size=60).filter(lambda t: t.strip()),
)


@st.composite
def well_formed_logs(draw) -> tuple[list[str], str]:
    kinds = draw(st.lists(st.sampled_from(["stats", "stats", "stats", "blank", "garbage"]), min_size=1, max_size=60))
    names = draw(st.lists(metric_names, min_size=1, max_size=5, unique=True))
    lines: list[str] = []
    for kind in kinds:
        if kind == "stats":
            name = draw(st.sampled_from(names))
            iteration = draw(st.one_of(st.integers(0, 30), st.integers(0, INT64_MAX)))  # small ones repeat
            value, digits = draw(values), draw(st.integers(1, 8))
            lines.append(f"{TS} - INFO - {name} \t\t\t\t iteration={iteration:0{digits}d} \t\t\t\t value={value}")
        elif kind == "blank":
            lines.append(draw(blank_lines))
        else:
            lines.append(draw(garbage_lines))
    if not any(STATS_LINE.match(line) for line in lines):
        lines.append(draw(stats_lines))
    return lines, draw(st.sampled_from(["\n", "\r\n"]))


def reference(lines: list[str]) -> tuple[dict[str, dict[int, float]], int, int, int, int]:
    """What the reference regex reads: name -> {iteration: value} (last wins), stats/blank/skipped/duplicates."""
    series: dict[str, dict[int, float]] = {}
    stats = blank = skipped = duplicates = 0
    for line in lines:
        match = STATS_LINE.match(line)
        if match is not None:
            stats += 1
            points = series.setdefault(match["name"], {})
            iteration = int(match["iteration"])
            duplicates += iteration in points
            points[iteration] = float(match["value"])
        elif line.strip():
            skipped += 1
        else:
            blank += 1
    return series, stats, blank, skipped, duplicates


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


def assert_read_like_the_reference(report, parsed, lines: list[str]) -> None:
    """Every line in the bucket the reference regex puts it in, every duplicate counted, every point equal."""
    expected, stats, blank, skipped, duplicates = reference(lines)
    assert (report.lines_read, report.stats_lines, report.blank_lines, report.skipped_lines) == (
        len(lines),
        stats,
        blank,
        skipped,
    )
    assert parsed.duplicated_points == duplicates
    got = {name: dict(zip(*(a.tolist() for a in parsed.series(k)), strict=True)) for k, name in enumerate(parsed.names)}
    assert got.keys() == expected.keys()
    for name, points in expected.items():
        assert sorted(got[name]) == sorted(points)
        assert all(same(got[name][it], value) for it, value in points.items()), name


@fuzz(200)
@given(log=well_formed_logs(), options=parser_options.filter(lambda o: o["max_line_bytes"] >= 300))
def test_well_formed_logs_parse_like_the_reference_and_every_line_is_accounted_for(log, options: dict) -> None:
    lines, newline = log
    data = "".join(line + newline for line in lines).encode()
    report, parsed = parse(data, options)

    assert_read_like_the_reference(report, parsed, lines)


def placed_sessions(sessions: list[list[str]]) -> list[list[str]] | None:
    """The sessions' lines with a restarted session's iterations offset after the earlier ones (the parser's rule:
    a session whose first stats line's iteration is not after the earlier sessions' first iteration follows
    their last one); None when an offset iteration would not fit in int64."""
    placed: list[list[str]] = []
    first = last = None
    for lines in sessions:
        matches = [(k, m) for k, line in enumerate(lines) if (m := STATS_LINE.match(line)) is not None]
        its = [int(m["iteration"]) for _k, m in matches]
        offset = last + 1 - its[0] if first is not None and last is not None and its[0] <= first else 0
        if offset and max(its) > INT64_MAX - offset:
            return None
        out = list(lines)
        for k, m in matches:
            out[k] = f"{TS} - INFO - {m['name']} \t iteration={int(m['iteration']) + offset} \t value={m['value']}"
        placed.append(out)
        first = its[0] if first is None else min(first, its[0])
        last = max(its) + offset if last is None else max(last, max(its) + offset)
    return placed


@fuzz(100)
@given(sessions=st.lists(well_formed_logs(), min_size=2, max_size=3))
def test_appended_sessions_restarts_follow_and_replays_last_file_wins(sessions) -> None:
    parser = StatsLogParser(block_bytes=512, workers=2)
    placed = placed_sessions([lines for lines, _newline in sessions])
    if placed is None:
        with pytest.raises(StatsLogError, match="restarted session"):
            for lines, newline in sessions:
                parser.feed(io.BytesIO("".join(line + newline for line in lines).encode()), "session.log")
        return
    for lines, newline in sessions:
        parser.feed(io.BytesIO("".join(line + newline for line in lines).encode()), "session.log")
    parsed = parser.finish()
    expected, stats, _blank, _skipped, duplicates = reference([line for lines in placed for line in lines])

    assert parsed.points == stats - duplicates
    assert parsed.duplicated_points == duplicates
    got = {name: dict(zip(*(a.tolist() for a in parsed.series(k)), strict=True)) for k, name in enumerate(parsed.names)}
    assert all(same(got[n][i], v) for n, points in expected.items() for i, v in points.items())


# --- predicted names (scan_block's fast path) --------------------------------------------------------------------
# nvdlfw_inspect writes the same names in the same order every logged iteration, and the scanner compares the name
# it predicts from that order in place, then reads the rest of the line forwards. Logs that cycle like the real
# ones, with single-byte edits anywhere in a few lines, check that a prediction never reads a line differently
# from the reference regex (a name with a suffix, another separator, more decimals, a CR, a digit in the header).

_EDIT_BYTES = b" \t\r\n-+.0123456789=anixvT:,Z"


@st.composite
def cyclic_logs_with_edits(draw) -> tuple[list[str], str]:
    names = draw(st.lists(metric_names, min_size=1, max_size=6, unique=True))
    cycles = draw(st.integers(2, 12))
    lines = [
        f"{TS} - INFO - {name} \t\t\t\t iteration={cycle:06d} \t\t\t\t value={draw(values)}"
        for cycle in range(cycles)
        for name in names
    ]
    for _ in range(draw(st.integers(0, 12))):
        k = draw(st.integers(0, len(lines) - 1))
        line = lines[k].encode()
        near = st.integers(max(0, len(line) - 48), len(line))  # the tail read forwards, or the header
        at = draw(st.one_of(near, st.integers(0, 40), st.integers(0, len(line))))
        byte = bytes([draw(st.sampled_from(_EDIT_BYTES))])
        edit = draw(st.sampled_from(["replace", "insert", "delete"]))
        if edit == "insert" or at == len(line):
            line = line[:at] + byte + line[at:]
        elif edit == "replace":
            line = line[:at] + byte + line[at + 1 :]
        else:
            line = line[:at] + line[at + 1 :]
        lines[k : k + 1] = line.decode("latin-1").split("\n")  # an inserted newline splits the line
    if not any(STATS_LINE.match(line) for line in lines):
        lines.append(draw(stats_lines))
    return lines, draw(st.sampled_from(["\n", "\r\n"]))


@fuzz(200)
@given(log=cyclic_logs_with_edits(), block_bytes=st.sampled_from([4096, 1 << 20]), workers=st.integers(1, 2))
def test_predicted_names_read_every_line_like_the_reference(log, block_bytes: int, workers: int) -> None:
    lines, newline = log
    data = "".join(line + newline for line in lines).encode("latin-1")
    report, parsed = parse(data, {"block_bytes": block_bytes, "workers": workers, "max_line_bytes": 4096})

    assert_read_like_the_reference(report, parsed, [line.rstrip("\r") for line in lines])
