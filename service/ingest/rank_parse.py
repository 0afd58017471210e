"""What the ingest jobs read out of an archive's members, before anything is stored (service/ingest/pipeline.py).

Belongs here: the callbacks the archive scan hands member streams to, and what they make of them: one rank's
statistics files parsed in session order, assembled into series, with a report per file (`RankParse`); the plan
job's parse of the first statistics file it meets, kept when that file is its rank's only one (`FirstRank`); the
metadata members, bounded, merged and reported in session order (`MetadataReader`). No database: claiming,
locking and storing a job's outcome stay in pipeline.py.
"""

from __future__ import annotations

import io
from typing import Any

from fp8_policy.policy.assemble import AssembledRun, assemble_run
from fp8_policy.policy.log_files import classify_log_path
from fp8_policy.policy.metadata_log import MetadataLog, merge_metadata, parse_metadata_lines
from fp8_policy.policy.stats_log import StatsLogError, StatsLogParser
from fp8_policy.service.ingest.archive.stream import ChunkedReader
from fp8_policy.service.ingest.parse import MAX_METADATA_BYTES, IngestError, stats_file_report
from fp8_policy.service.settings import Settings


class FirstRank:
    """The plan job's scan reads every byte anyway: it parses the first statistics file it meets, and when that
    file is its rank's only one, stores that rank itself (a single-rank upload is then decompressed once).
    Any parse error is left to the rank job, which reports it with the rank."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.streamed: str | None = None
        self.parse: RankParse | None = None

    def feed(self, streamed: str, stream: io.BufferedIOBase) -> None:
        if self.streamed is not None:
            return
        self.streamed = streamed
        logfile = classify_log_path(streamed)
        if logfile is None:
            return
        parse = RankParse(self.settings, logfile.rank)
        try:
            parse.feed(stream, streamed)
        except StatsLogError:
            return
        self.parse = parse

    def result(
        self, stats: dict[int, list[tuple[str, str]]], metadata: MetadataLog
    ) -> tuple[int, AssembledRun, dict[str, Any]] | None:
        parse = self.parse
        if parse is None or [streamed for _m, streamed in stats.get(parse.rank, [])] != [self.streamed]:
            return None
        parse.reports[0]["path"] = stats[parse.rank][0][0]  # the member's name, as rank jobs report it
        assembled, result = parse.finish(metadata)
        return parse.rank, assembled, result


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

    def finish(self, metadata: MetadataLog) -> tuple[AssembledRun, dict[str, Any]]:
        parsed = self.parser.finish()
        self.parser = None  # type: ignore[assignment]  # its buffers go before the series are stored
        assembled = assemble_run({self.rank: parsed}, metadata)
        reports = self.reports
        result = {
            "files": reports,
            "lines_read": sum(r["lines_read"] for r in reports),
            "lines_skipped": sum(r["skipped_lines"] for r in reports),
            "lines_blank": sum(r["blank_lines"] for r in reports),
            "lines_duplicated": parsed.duplicated_points,
            "unsplit_names": assembled.unsplit_names,
            "unsplit_points": assembled.unsplit_points,
        }
        return assembled, result


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
