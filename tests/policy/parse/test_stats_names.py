"""A parse that starts from the names an earlier parse of the same file left (policy/parse/stats_names.KnownNames: what
service/live keeps between a live file's pieces) yields exactly what a fresh parse of the same bytes yields: the
same series in the same order (a fresh parser lists them in the order it registers their names), the same points
and the same report; on random logs cut at random byte offsets, with garbage, blank, over-long and slow-path lines
mixed in, blocks of a few lines and restarted sessions."""

from __future__ import annotations

import io

import numpy as np
import pytest

from fp8_policy.policy.parse.stats_log import FileReport, NoStatsLines, ParsedStats, StatsLogParser
from fp8_policy.policy.parse.stats_names import KnownNames
from tests.policy.live.test_live_batch import random_log

TS = "2026-01-15 23:06:40,060"
SOURCE = "rank_0/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log"


def line(name: str, iteration: int, value: str = "0.5000") -> str:
    return f"{TS} - INFO - {name} \t\t\t\t iteration={iteration:06d} \t\t\t\t value={value}\n"


BLANK_NAME = f"{TS} - INFO -   \t iteration=7 \t value=1.0\n"  # the regex's name " ": the kernel hands it on


def parse(
    data: bytes, known: KnownNames | None = None, **options: int
) -> tuple[FileReport | None, ParsedStats | None, KnownNames]:
    parser = StatsLogParser(workers=1, known=known, **options)
    try:
        report = parser.feed(io.BytesIO(data), SOURCE)
    except NoStatsLines:
        return None, None, parser.known_names()
    return report, parser.finish(), parser.known_names()


def assert_same(got: tuple, want: tuple) -> None:
    (report, parsed, _), (want_report, want_parsed, _) = got, want
    assert report == want_report
    if want_parsed is None:
        assert parsed is None
        return
    assert parsed is not None
    assert parsed.names == want_parsed.names
    assert parsed.offsets.tolist() == want_parsed.offsets.tolist()
    assert parsed.iterations.tolist() == want_parsed.iterations.tolist()
    assert np.array_equal(parsed.values, want_parsed.values, equal_nan=True)
    assert parsed.duplicated_points == want_parsed.duplicated_points


def test_series_come_in_the_order_of_the_piece_not_of_the_known_names() -> None:
    names = ["model.l1_activation_mse", "model.l2_activation_mse", "model.l3_activation_mse"]
    first = "".join(line(name, 1) for name in names).encode()
    second = "".join(line(name, 2) for name in names[2:] + names[:2]).encode()  # the piece starts mid-cycle
    _r, _p, known = parse(first)
    assert_same(parse(second, known), parse(second))
    assert parse(second, known)[1].names == names[2:] + names[:2]  # type: ignore[union-attr]


def test_names_the_regex_takes_come_after_the_kernels_in_the_first_block() -> None:
    """A fresh parser registers the kernel's names of its first block, then the regex's (the slow path)."""
    _r, _p, known = parse((BLANK_NAME + line("model.a_gradient_mse", 1)).encode())
    second = (BLANK_NAME + line("model.a_gradient_mse", 2) + line("model.b_gradient_mse", 2)).encode()
    assert parse(second)[1].names == ["model.a_gradient_mse", "model.b_gradient_mse", " "]  # type: ignore[union-attr]
    assert_same(parse(second, known), parse(second))
    third = (line("model.c_gradient_mse", 3) + BLANK_NAME + line("model.a_gradient_mse", 3)).encode()
    for block_bytes in (64, 200, 4096):  # the regex's names of later blocks: in line order with the kernel's
        assert_same(parse(third, known, block_bytes=block_bytes), parse(third, block_bytes=block_bytes))


def noisy_log(rng: np.random.Generator) -> bytes:
    """A random rank log (tests/policy/live/test_live_batch.random_log) with other lines here and there: garbage, blank,
    CRLF, the regex-only name, and copies of statistics lines padded past the line limit (an over-long line whose
    name the kernel may register before its short lines)."""
    lines = random_log(rng, 0, 1).decode().splitlines(keepends=True)
    out = []
    for text in lines:
        roll = rng.random()
        if roll < 0.01:
            out.append("garbage that is no statistics line\n")
        elif roll < 0.02:
            out.append("\n")
        elif roll < 0.03:
            out.append(BLANK_NAME)
        elif roll < 0.04:
            out.append(text.replace(" iteration=", " " * 400 + " iteration=", 1))
        elif roll < 0.05:
            text = text.replace("\n", "\r\n")
        out.append(text)
    if rng.random() < 0.5:  # a restarted session: its iterations start again
        out += lines[: len(lines) // 3]
    return "".join(out).encode()


@pytest.mark.parametrize("seed", range(30))
def test_pieces_parse_the_same_with_the_known_names_as_afresh(seed: int) -> None:
    rng = np.random.default_rng(seed)
    log = noisy_log(rng)
    options = {"block_bytes": int(rng.choice([256, 1024, 4096, 1 << 20])), "max_line_bytes": 300}
    cuts = sorted({0, len(log), *rng.integers(0, len(log), size=int(rng.integers(2, 14))).tolist()})
    known: KnownNames | None = None
    parsed_to, reordered = 0, 0
    for end in cuts[1:]:
        data = log[parsed_to:end]
        whole = data[: data.rfind(b"\n") + 1]  # the service parses a piece's whole lines
        if not whole:
            continue
        parsed_to += len(whole)
        fresh = parse(whole, **options)
        kept = parse(whole, known, **options)
        assert_same(kept, fresh)
        if known is not None and fresh[1] is not None:
            registered = known.table.names[: len(fresh[1].names)]
            reordered += registered != fresh[1].names
        known = kept[2]  # as left by the parse, even one that found no statistics line
    assert known is not None and known.complete()
    assert reordered or len(cuts) < 4  # the pieces did start mid-cycle: the order was given back
