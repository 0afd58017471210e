"""Tests for policy.parse.log_files: the nvdlfw_inspect file-name grammar and the per-rank reading order."""

from __future__ import annotations

import pytest

from fp8_policy.policy.parse.log_files import Kind, LogFile, classify_log_path, order_log_files, single_file_log

STATS = "nvdlfw_inspect_statistics_logs"
META = "nvdlfw_inspect_logs"


@pytest.mark.parametrize(
    ("relpath", "kind", "rank", "stamp"),
    [
        (f"rank_0/{STATS}/nvdlfw_inspect_globalrank-0.log", "stats", 0, None),
        (f"rank_0/{META}/nvdlfw_inspect_globalrank-0.log", "metadata", 0, None),
        (f"{STATS}/nvdlfw_inspect_globalrank-3.log", "stats", 3, None),  # no rank_N level
        (f"{META}/nvdlfw_inspect_globalrank-12.log", "metadata", 12, None),
        (f"run1/rank_1/{STATS}/nvdlfw_inspect_globalrank-1.log", "stats", 1, None),  # nested top folder
        (f"a/b/c/{STATS}/nvdlfw_inspect_globalrank-0.log", "stats", 0, None),
        (f"./rank_0/{STATS}/nvdlfw_inspect_globalrank-0.log", "stats", 0, None),
        (f"rank_0/{STATS}/nvdlfw_inspect_20260115_230641_globalrank-0.log", "stats", 0, "20260115_230641"),
        (f"{META}/nvdlfw_inspect_20260115_230641_globalrank-7.log", "metadata", 7, "20260115_230641"),
        (f"rank_2/{STATS}/nvdlfw_inspect_globalrank-2.log.gz", "stats", 2, None),
        (f"rank_0/{STATS}/nvdlfw_inspect_globalrank-5.log", "stats", 5, None),  # dir rank differs: trust file
    ],
)
def test_classify_log_path_accepts_nvdlfw_layouts(relpath: str, kind: Kind, rank: int, stamp: str | None) -> None:
    expected = LogFile(kind=kind, rank=rank, stamp=stamp, relpath=relpath)

    assert classify_log_path(relpath) == expected


@pytest.mark.parametrize(
    "relpath",
    [
        "run.log",
        "nvdlfw_inspect_globalrank-0.log",  # no kind folder: only single uploads may rely on the basename
        f"rank_0/{STATS}/nvdlfw_inspect_globalrank-0.txt",
        f"rank_0/{STATS}/nvdlfw_inspect_globalrank-0.log.bak",
        f"rank_0/{STATS}/nvdlfw_inspect_globalrank-.log",
        f"rank_0/{STATS}/nvdlfw_inspect_2026011_230641_globalrank-0.log",  # stamp too short
        f"__MACOSX/rank_0/{STATS}/._nvdlfw_inspect_globalrank-0.log",
        f"rank_0/x{STATS}/nvdlfw_inspect_globalrank-0.log",
        f"rank_0/{STATS}/sub/nvdlfw_inspect_globalrank-0.log",
        f"tensor_dumps/rank_0/iter_000010/{STATS}",
        f"rank_0\\{STATS}\\nvdlfw_inspect_globalrank-0.log",  # backslashes are not separators
        "",
    ],
)
def test_classify_log_path_rejects_other_paths(relpath: str) -> None:
    assert classify_log_path(relpath) is None


def test_log_file_knows_when_it_is_gzipped() -> None:
    assert classify_log_path(f"{STATS}/nvdlfw_inspect_globalrank-0.log.gz").gzipped  # type: ignore[union-attr]
    assert not classify_log_path(f"{STATS}/nvdlfw_inspect_globalrank-0.log").gzipped  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("run.log", LogFile("stats", 0, None, "run.log")),
        (None, LogFile("stats", 0, None, "upload.log")),
        ("", LogFile("stats", 0, None, "upload.log")),
        ("nvdlfw_inspect_globalrank-3.log", LogFile("stats", 3, None, "nvdlfw_inspect_globalrank-3.log")),
        (
            "nvdlfw_inspect_20260115_230641_globalrank-2.log.gz",
            LogFile("stats", 2, "20260115_230641", "nvdlfw_inspect_20260115_230641_globalrank-2.log.gz"),
        ),
        (
            "../../etc/nvdlfw_inspect_globalrank-1.log",
            LogFile("stats", 1, None, "nvdlfw_inspect_globalrank-1.log"),
        ),
        ("C:\\Users\\me\\run.log", LogFile("stats", 0, None, "run.log")),
    ],
)
def test_single_file_log_is_stats_with_rank_from_basename(filename: str | None, expected: LogFile) -> None:
    assert single_file_log(filename) == expected


def _log(kind: Kind, rank: int, stamp: str | None, relpath: str = "") -> LogFile:
    return LogFile(kind=kind, rank=rank, stamp=stamp, relpath=relpath or f"{kind}-{rank}-{stamp}")


def test_order_log_files_puts_stamps_in_order_and_untimestamped_last() -> None:
    plain = _log("stats", 0, None)
    newer = _log("stats", 0, "20260116_090000")
    older = _log("stats", 0, "20260115_230641")

    assert order_log_files([plain, newer, older]) == {0: [older, newer, plain]}


def test_order_log_files_groups_by_rank_and_keeps_kinds_apart() -> None:
    stats1 = _log("stats", 1, None)
    stats0 = _log("stats", 0, None)
    meta0 = _log("metadata", 0, None)
    files = [stats1, meta0, stats0]

    stats = order_log_files(files)
    metadata = order_log_files(files, kind="metadata")

    assert stats == {0: [stats0], 1: [stats1]}
    assert list(stats) == [0, 1]
    assert metadata == {0: [meta0]}


def test_order_log_files_breaks_ties_by_relpath() -> None:
    second = _log("stats", 0, None, relpath="run2/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log")
    first = _log("stats", 0, None, relpath="run1/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log")

    assert order_log_files([second, first]) == {0: [first, second]}


def test_order_log_files_of_nothing_is_empty() -> None:
    assert order_log_files([]) == {}
