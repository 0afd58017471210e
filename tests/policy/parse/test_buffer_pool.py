"""policy/parse/buffer_pool.py's FreeList, and the parser's buffers kept between parses in one process (the read
buffers of policy/parse/stats_blocks.py, the scratch sets and staging chunks of policy/parse/stats_scan.py)."""

from __future__ import annotations

import io

import numpy as np

from fp8_policy.policy.parse import stats_blocks, stats_log, stats_scan
from fp8_policy.policy.parse.buffer_pool import FreeList
from tests.support.archives import stats_line


def test_take_hands_out_the_smallest_item_that_fits() -> None:
    free: FreeList[bytes] = FreeList(4, len)
    for item in (b"x" * 8, b"x" * 2, b"x" * 5):
        free.give(item)

    assert free.take(3) == b"x" * 5
    assert free.take(9) is None
    assert free.take(1) == b"x" * 2
    assert len(free) == 1


def test_a_full_list_keeps_the_larger_items() -> None:
    free: FreeList[bytes] = FreeList(2, len)
    for item in (b"x" * 4, b"x" * 6, b"x" * 1, b"x" * 9):
        free.give(item)

    assert sorted(len(free.take(0) or b"") for _ in range(2)) == [6, 9]
    assert len(free) == 0


def _log(iterations: int) -> bytes:
    names = [f"model.layers.{k}.fc1_activation_underflows%" for k in range(4)]
    return "".join(stats_line(n, it, it / 16) + "\n" for it in range(iterations) for n in names).encode()


def test_a_second_parse_reuses_the_first_ones_buffers_and_reads_the_same(monkeypatch) -> None:
    for free in (stats_blocks._READ_BUFFERS, stats_scan._SCRATCH_SETS, stats_scan._STAGING_CHUNKS):
        monkeypatch.setattr(free, "_items", [])
    monkeypatch.setattr(stats_scan, "_STAGING_POINTS", 1000)  # several staging chunks per parse
    data = _log(3000)

    def parse():
        parser = stats_log.StatsLogParser(block_bytes=64 * 1024, workers=2)
        parser.feed(io.BytesIO(data), "a.log")
        return parser.finish()

    first = parse()
    kept = {id(c[0]) for c in stats_scan._STAGING_CHUNKS._items}
    assert kept and len(stats_blocks._READ_BUFFERS) > 0 and len(stats_scan._SCRATCH_SETS) > 0

    second = parse()

    assert kept & {id(c[0]) for c in stats_scan._STAGING_CHUNKS._items}  # the same chunks went round again
    assert first.names == second.names
    assert np.array_equal(first.offsets, second.offsets)
    assert np.array_equal(first.iterations, second.iterations) and np.array_equal(first.values, second.values)
    assert second.points == 12000 and second.series(3)[1][-1] == 2999 / 16


def test_prefault_fills_the_free_lists_for_one_parse(monkeypatch) -> None:
    for free in (stats_blocks._READ_BUFFERS, stats_scan._SCRATCH_SETS, stats_scan._STAGING_CHUNKS):
        monkeypatch.setattr(free, "_items", [])

    stats_scan.prefault_buffers(workers=1, staging_points=2 * stats_scan._STAGING_POINTS)

    assert len(stats_blocks._READ_BUFFERS) == 3 and len(stats_scan._SCRATCH_SETS) == 3
    assert len(stats_scan._STAGING_CHUNKS) == 2
    assert stats_blocks._READ_BUFFERS.take(stats_blocks.DEFAULT_BLOCK_BYTES + 1000) is not None  # a block plus a carry
