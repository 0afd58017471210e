"""The plan job's parse of every rank during its scan (service/ingest/scan_ranks.py) and of the metadata members
(MetadataReader in service/ingest/rank_parse.py), without a database: replicas share one kept content, what the
scan cannot parse in order or within its budget is left to rank jobs, and a metadata log that shares an earlier
log's parse reads exactly as its own full parse would."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from fp8_policy.policy.parallel import LOCAL, ParallelLayout
from fp8_policy.policy.parse.metadata_log import parse_metadata_lines
from fp8_policy.policy.synthetic.parallel import ParallelJob, write_parallel_job
from fp8_policy.policy.synthetic.run import SyntheticRun
from fp8_policy.service.ingest import scan_ranks
from fp8_policy.service.ingest.rank_parse import MetadataReader
from fp8_policy.service.ingest.scan_ranks import ScanRanks, content_digest
from fp8_policy.service.settings import Settings
from tests.support.archives import stats_log, stats_relpath

NAME = "model.layers.1.fc1_activation_underflows%"


def _job(tmp_path: Path, **options: object):
    layout = ParallelLayout(tp=1, pp=2, dp=2, num_layers=4)
    run = SyntheticRun(family="megatron", num_layers=4, first_index=0, iterations=30, freq=10)
    return write_parallel_job(ParallelJob(run, layout, naming=LOCAL, **options), tmp_path / "logs")  # type: ignore[arg-type]


def _scan(settings: Settings, members: list[tuple[str, bytes]]) -> ScanRanks:
    ranks = ScanRanks(settings)
    for streamed, data in members:
        ranks.feed(streamed, io.BytesIO(data))  # type: ignore[arg-type]
    stats: dict[int, list[tuple[str, str]]] = {}
    for streamed, _data in members:
        stats.setdefault(int(streamed.split("globalrank-")[1].split(".")[0]), []).append((streamed, streamed))
    for rank in stats:  # the scan lists a rank's sessions oldest first (service/ingest/archive/stream.py)
        stats[rank].sort(key=lambda pair: ("_2" not in pair[0], pair[0]))
    ranks.settle(stats)
    return ranks


def test_replicas_share_one_kept_content_and_a_fault_keeps_its_own(tmp_path: Path) -> None:
    written = _job(tmp_path, faulty={3: 2.0})
    members = [
        (f"rank_{f.rank}/nvdlfw_inspect_statistics_logs/{f.stats_path.name}", f.stats_path.read_bytes())
        for f in written.files
    ]
    ranks = _scan(Settings(_env_file=None), members)

    assert ranks.left == {}
    assert ranks.ranks[1].content is ranks.ranks[0].content  # stage 0's replicas: parsed twice, kept once
    assert ranks.ranks[3].content is not ranks.ranks[2].content  # stage 1: rank 3 scaled its values
    assert len(ranks.contents) == 3 and ranks.ranks[0].content.ranks == [0, 1]


def test_a_large_member_streamed_in_place_reads_as_a_small_one_parsed_in_the_background(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = _job(tmp_path)
    data = written.files[0].stats_path.read_bytes()
    member = [("rank_0/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log", data)]
    small = _scan(Settings(_env_file=None), member).ranks[0].content
    monkeypatch.setattr(scan_ranks, "INLINE_MEMBER_BYTES", 1000)
    large = _scan(Settings(_env_file=None), member).ranks[0].content
    assert small.digest == large.digest and small.parsed is not None and large.parsed is not None
    assert content_digest(small.parsed) == content_digest(large.parsed)


def test_what_the_scan_cannot_parse_in_order_or_within_its_budget_is_left_to_rank_jobs() -> None:
    old = stats_log([(NAME, 0, 1.0)])
    new = stats_log([(NAME, 0, 2.0)])
    members = [
        (stats_relpath(0), new),  # rank 0: its newer session first
        (stats_relpath(0, stamp="20260101_000000"), old),
        (stats_relpath(1, stamp="20260101_000000"), old),  # rank 1: in order but apart
        (stats_relpath(2), b"2026-01-01 00:00:00,000 - INFO - not a statistics line\n"),
        (stats_relpath(1), new),
        (stats_relpath(3, stamp="20260101_000000"), old),  # rank 3: both sessions in order, together
        (stats_relpath(3), new),
    ]
    ranks = _scan(Settings(_env_file=None), members)
    assert sorted(ranks.left) == [0, 1, 2] and sorted(ranks.ranks) == [3]
    assert ranks.ranks[3].content.parsed is not None and ranks.ranks[3].content.points == 2

    another = (stats_relpath(4), stats_log([(NAME, 0, 3.0)]))
    budget = _scan(Settings(_env_file=None, scan_parse_bytes=1), [*members[5:], another])
    assert (sorted(budget.ranks), sorted(budget.left)) == ([3], [4])  # the first parse fits any budget but 0
    none = _scan(Settings(_env_file=None, scan_parse_bytes=0), members[5:])
    assert (sorted(none.left), none.ranks) == ([3], {})


def test_a_metadata_log_sharing_an_earlier_ones_parse_reads_as_its_own_full_parse(tmp_path: Path) -> None:
    written = _job(tmp_path, record_layout=True)
    logs = [f.metadata_path.read_bytes() for f in written.files]
    odd = logs[2].replace(b"\n", b"\r\n", 3)  # other line breaks: parsed in full
    broken = logs[3] + b"2026-01-15 23:06:31,201 - INFO - fp8_policy parallel {not json\nnot a log line\n"
    reader = MetadataReader()
    for k, data in enumerate([*logs, odd, broken]):
        reader.parse(str(k), data)
    for k, data in enumerate([*logs, odd, broken]):
        full = parse_metadata_lines(data.decode().splitlines())
        got = reader.logs[str(k)]
        assert (got, got.lines_read, got.lines_unrecognised, got.parallel) == (
            full,
            full.lines_read,
            full.lines_unrecognised,
            full.parallel,
        ), k
    assert reader.logs["1"].plans is reader.logs["0"].plans  # stage 0's replicas: one parse
    assert reader.logs["1"].parallel["dp_rank"] == 1
