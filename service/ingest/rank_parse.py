"""What the ingest jobs read out of an archive's members, before anything is stored (service/ingest/pipeline.py).

Belongs here: the callbacks the archive scan hands member streams to, and what they make of them: one rank's
statistics files parsed in session order by its own job, assembled into series under global names, with a report
per file and the rank's digests (`RankParse`, `rank_result`); the metadata members, bounded, merged and reported
in session order (`MetadataReader`). The plan job's parse of every rank during its scan is service/ingest/
scan_ranks.py and plan_ranks.py. No database: claiming, locking and storing a job's outcome stay in pipeline.py.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from typing import Any

import numpy as np

from fp8_policy.policy.parse.assemble import AssembledRun, assemble_run
from fp8_policy.policy.parse.log_files import classify_log_path
from fp8_policy.policy.parse.metadata_log import PARALLEL_RECORD, MetadataLog, merge_metadata, parse_metadata_lines
from fp8_policy.policy.parse.stats_log import StatsLogParser
from fp8_policy.service.ingest.archive.stream import ChunkedReader
from fp8_policy.service.ingest.parallel_ranks import MetricSplit, rank_digests
from fp8_policy.service.ingest.parse import MAX_METADATA_BYTES, IngestError, stats_file_report
from fp8_policy.service.ingest.scan_ranks import content_digest
from fp8_policy.service.settings import Settings

# The messages that differ from rank to rank: nvdlfw_inspect's own log path and the rank's parallel record.
_PER_RANK = (b" - Default logging to file enabled at ", b" - " + PARALLEL_RECORD.encode())
# Line breaks str.splitlines() sees besides \n (a log holding one is parsed in full): single bytes, UTF-8 pairs.
_ODD_BREAK_BYTES = b"\r\x0b\x0c\x1c\x1d\x1e"
_ODD_BREAK_CHARS = (b"\xc2\x85", b"\xe2\x80\xa8", b"\xe2\x80\xa9")
# nvdlfw_inspect's logging header `2026-01-15 23:06:31,201 - `: the digits' offsets, the other characters'.
_TS_DIGITS = np.array([0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22])
_TS_MARK_AT = np.array([4, 7, 10, 13, 16, 19, 23, 24, 25])
_TS_MARKS = np.frombuffer(b"--  ::, - ", dtype=np.uint8)[[0, 1, 2, 4, 5, 6, 7, 8, 9]]
_TS_SPAN = np.arange(23)


def _messages_key(data: bytes) -> tuple[bytes, list[bytes]] | None:
    """A digest of a metadata log without its timestamps and per-rank lines (those returned apart, to be parsed
    on their own), or None when a line lacks the header shape nvdlfw_inspect writes. Every line then starts with
    a 23-character timestamp that the header pattern of policy/parse/metadata_log.py reads as any other: two logs with
    the same digest parse alike but for the per-rank lines. Array operations, not a loop over lines."""
    if not data or len(data.translate(None, _ODD_BREAK_BYTES)) != len(data) or any(c in data for c in _ODD_BREAK_CHARS):
        return None
    arr = np.frombuffer(data, dtype=np.uint8)
    breaks = np.flatnonzero(arr == 10)
    starts = np.concatenate(([0], breaks + 1))
    ends = np.concatenate((breaks, [arr.shape[0]]))
    if starts[-1] == arr.shape[0]:  # the last line's \n ends the file
        starts, ends = starts[:-1], ends[:-1]
    if ((ends - starts) < 26).any():
        return None
    digits = arr[starts[:, None] + _TS_DIGITS]
    if ((digits < 48) | (digits > 57)).any() or (arr[starts[:, None] + _TS_MARK_AT] != _TS_MARKS).any():
        return None
    keep = np.ones(arr.shape[0], dtype=bool)
    keep[(starts[:, None] + _TS_SPAN).ravel()] = False
    own = []
    for marker in _PER_RANK:
        at = data.find(marker)
        while at >= 0:
            first = data.rfind(b"\n", 0, at) + 1
            stop = data.find(b"\n", at)
            stop = len(data) if stop < 0 else stop
            level = data[first + 23 : at]  # " - INFO" ... " - WARNING"
            if level[:3] == b" - " and level[3:].isalpha() and level[3:].isupper():
                own.append(data[first:stop])
                keep[first:stop] = False
            at = data.find(marker, stop)
    return hashlib.sha256(arr[keep].tobytes()).digest(), own


class RankParse:
    """One rank's statistics files, fed in session order, summarised into its series and its report."""

    def __init__(self, settings: Settings, rank: int) -> None:
        self.rank = rank
        self.parser = StatsLogParser(max_line_bytes=settings.max_line_bytes, workers=settings.parse_threads)
        self.reports: list[dict[str, Any]] = []

    def feed(self, stream: io.BufferedIOBase, source: str) -> None:
        """One member's stream, read 1 MiB at a time into the parser's blocks (see ChunkedReader)."""
        report = self.parser.feed(ChunkedReader(stream), source)
        self.reports.append(stats_file_report(report, self.rank))

    def finish(self, logged: MetadataLog, rename: Callable[[str], str]) -> tuple[AssembledRun, dict[str, Any]]:
        """The rank's series (names split with the known layers of `logged`, the metadata under logged names) and
        its result: counts, and its digests under the names `rename` gives (global names)."""
        parsed = self.parser.finish()
        self.parser = None  # type: ignore[assignment]  # its buffers go before the series are stored
        assembled = assemble_run({self.rank: parsed}, logged, with_layers=False)
        metrics = MetricSplit(logged.known_layers()).of(parsed.names)
        digests = rank_digests(content_digest(parsed), parsed, metrics, rename)
        result = rank_result(self.reports, parsed.duplicated_points, assembled.unsplit_names, assembled.unsplit_points)
        result["parallel"] = {**digests.as_dict(), "stored": True, "scanned": False}
        return assembled, result


def rank_result(
    reports: list[dict[str, Any]], duplicated: int, unsplit_names: list[str], unsplit_points: int
) -> dict[str, Any]:
    """A rank job's result (the plan job records the same for the ranks it parsed): what finalize sums up."""
    return {
        "files": reports,
        "lines_read": sum(r["lines_read"] for r in reports),
        "lines_skipped": sum(r["skipped_lines"] for r in reports),
        "lines_blank": sum(r["blank_lines"] for r in reports),
        "lines_duplicated": duplicated,
        "unsplit_names": unsplit_names,
        "unsplit_points": unsplit_points,
    }


class MetadataReader:
    """Parses the metadata members of the scan (each bounded); merged and reported in session order."""

    def __init__(self) -> None:
        self.logs: dict[str, MetadataLog] = {}
        self._by_messages: dict[bytes, tuple[MetadataLog, int]] = {}  # and the unrecognised lines among its own

    def read(self, streamed: str, stream: io.BufferedIOBase) -> None:
        self.parse(streamed, self.take(streamed, stream))

    @staticmethod
    def take(streamed: str, stream: io.BufferedIOBase) -> bytes:
        """A metadata member's bytes (bounded: MetadataTooLarge past MAX_METADATA_BYTES)."""
        data = stream.read(MAX_METADATA_BYTES + 1)
        if len(data) > MAX_METADATA_BYTES:
            raise IngestError(
                "MetadataTooLarge",
                f"{streamed.rsplit('/', 1)[-1]}: more than {MAX_METADATA_BYTES} bytes is not a metadata log",
            )
        return data

    def parse(self, streamed: str, data: bytes) -> None:
        """Parse one member. The ranks of a job write the same messages with other timestamps (every
        data-parallel and tensor-parallel rank of a stage names the same layers): a log whose lines, less their
        headers and the per-rank messages (its log path, its parallel record), equal an earlier log's shares that
        log's parsed layers (read-only) and parses only its own record lines: 1,024 ranks' 207k lines took
        1 s of the plan job's CPU, now 0.1 s."""
        text = data.decode("utf-8", "replace")
        found = _messages_key(data)
        if found is None:
            self.logs[streamed] = parse_metadata_lines(text.splitlines())
            return
        same, own_lines = found
        own = parse_metadata_lines([line.decode("utf-8", "replace") for line in own_lines])
        earlier = self._by_messages.get(same)
        if earlier is None:
            log = parse_metadata_lines(text.splitlines())
            self._by_messages[same] = (log, own.lines_unrecognised)
        else:
            first, first_own = earlier
            log = MetadataLog(
                assigned=first.assigned,
                plans=first.plans,
                layer_order=first.layer_order,
                lines_read=data.count(b"\n") + (not data.endswith(b"\n")),
                lines_unrecognised=first.lines_unrecognised - first_own + own.lines_unrecognised,
                parallel=own.parallel,
                content_key=first.content_key,
            )
        self.logs[streamed] = log

    def merged(self, members: list[tuple[str, str]]) -> MetadataLog:
        return merge_metadata(self.logs[streamed] for _member, streamed in members)

    def reports(self, members: list[tuple[str, str]]) -> list[dict[str, Any]]:
        out = []
        for member, streamed in members:
            meta, logfile = self.logs[streamed], classify_log_path(streamed)
            out.append(
                {
                    "path": member,
                    "rank": logfile.rank if logfile else 0,
                    "kind": "metadata",
                    "lines_read": meta.lines_read,
                    "lines_unrecognised": meta.lines_unrecognised,
                }
            )
        return out
