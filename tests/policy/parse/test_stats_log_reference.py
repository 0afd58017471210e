"""Tests for policy.parse.stats_log.StatsLogParser against references: the real bionemo logs read like the reference
regex, and the compiled fast path against the reference regex on seeded random logs and on every single-byte edit
of a predicted line.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fp8_policy.policy.parse.stats_log import STATS_LINE, FileReport
from tests.policy.parse.stats_lines import (
    BIG_BLOCK,
    HEADER,
    SPEC_LINE,
    _mixed_log,
    assert_same_series,
    lines,
    parse,
)
from tests.support.archives import ESM2_STATS, LLAMA3_STATS, TS, parse_reference, stats_line


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
