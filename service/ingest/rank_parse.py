"""What the ingest jobs read out of an archive's members, before anything is stored (service/ingest/pipeline.py).

Belongs here: the callbacks the archive scan hands member streams to, and what they make of them: one rank's
statistics files parsed in session order by its own job, assembled into series under global names, with a report
per file and the rank's digests (`RankParse`, `rank_result`); the metadata members, bounded, merged and reported
in session order (`MetadataReader`). The plan job's parse of every rank during its scan is service/ingest/
scan_ranks.py and plan_ranks.py. No database: claiming, locking and storing a job's outcome stay in pipeline.py.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from fp8_policy.policy.assemble import AssembledRun, assemble_run
from fp8_policy.policy.log_files import classify_log_path
from fp8_policy.policy.metadata_log import MetadataLog, merge_metadata, parse_metadata_lines
from fp8_policy.policy.stats_log import StatsLogParser
from fp8_policy.service.ingest.archive.stream import ChunkedReader
from fp8_policy.service.ingest.parallel_ranks import MetricSplit, rank_digests
from fp8_policy.service.ingest.parse import MAX_METADATA_BYTES, IngestError, stats_file_report
from fp8_policy.service.ingest.scan_ranks import content_digest
from fp8_policy.service.settings import Settings


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
        assembled = assemble_run({self.rank: parsed}, logged)
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

    def read(self, streamed: str, stream: io.BufferedIOBase) -> None:
        data = stream.read(MAX_METADATA_BYTES + 1)
        if len(data) > MAX_METADATA_BYTES:
            raise IngestError(
                "MetadataTooLarge",
                f"{streamed.rsplit('/', 1)[-1]}: more than {MAX_METADATA_BYTES} bytes is not a metadata log",
            )
        self.logs[streamed] = parse_metadata_lines(data.decode("utf-8", "replace").splitlines())

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
