"""Turn the extracted log files of one upload into an `AssembledRun` plus the ingest report."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from fp8_policy.db.runs import IngestCounts
from fp8_policy.policy.parse.assemble import AssembledRun, assemble_run
from fp8_policy.policy.parse.log_files import LogFile, session_key
from fp8_policy.policy.parse.metadata_log import MetadataLog, merge_metadata, parse_metadata_lines
from fp8_policy.policy.parse.stats_log import FileReport, ParsedStats, StatsLogParser

MAX_METADATA_BYTES = 256 * 1024 * 1024


class IngestError(Exception):
    """A run that cannot be stored; `code` is stable, the message names the file."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


def parse_files(
    files: list[tuple[LogFile, Path]], *, max_line_bytes: int, threads: int
) -> tuple[AssembledRun, IngestCounts]:
    """Parse every stats file rank by rank (sessions in order) and every metadata file."""
    stats: dict[int, list[tuple[LogFile, Path]]] = defaultdict(list)
    metadata: list[MetadataLog] = []
    report_files: list[dict[str, Any]] = []
    for log, path in sorted(files, key=lambda item: session_key(item[0])):
        if log.kind == "stats":
            stats[log.rank].append((log, path))
        else:
            meta = _read_metadata(path)
            metadata.append(meta)
            report_files.append(
                {
                    "path": log.relpath,
                    "rank": log.rank,
                    "kind": "metadata",
                    "lines_read": meta.lines_read,
                    "lines_unrecognised": meta.lines_unrecognised,
                }
            )
    parsed: dict[int, ParsedStats] = {}
    for rank, rank_files in sorted(stats.items()):
        parser = StatsLogParser(max_line_bytes=max_line_bytes, workers=threads)
        for log, path in rank_files:
            with open(path, "rb") as handle:
                report = parser.feed(handle, log.relpath)
            report_files.append(stats_file_report(report, rank))
        parsed[rank] = parser.finish()
    assembled = assemble_run(parsed, merge_metadata(metadata))
    return assembled, _counts(parsed, assembled, report_files)


def stats_file_report(report: FileReport, rank: int) -> dict[str, Any]:
    """One statistics log's entry in the run's ingest report (both ingest paths write the same one)."""
    return {
        "path": report.source,
        "rank": rank,
        "kind": "stats",
        "lines_read": report.lines_read,
        "stats_lines": report.stats_lines,
        "blank_lines": report.blank_lines,
        "skipped_lines": report.skipped_lines,
        "skipped_samples": report.skipped_samples,
        "iteration_offset": report.iteration_offset,  # a restarted session placed after the earlier ones
    }


def _read_metadata(path: Path) -> MetadataLog:
    size = path.stat().st_size
    if size > MAX_METADATA_BYTES:
        raise IngestError("MetadataTooLarge", f"{path.name}: {size} bytes is not a metadata log")
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        return parse_metadata_lines(handle.read().splitlines())


def _counts(parsed: dict[int, ParsedStats], assembled: AssembledRun, files: list[dict[str, Any]]) -> IngestCounts:
    stats_files = [f for f in files if f["kind"] == "stats"]
    report = {
        "files": files,
        "unsplit_metric_names": assembled.unsplit_names,
        "unsplit_points": assembled.unsplit_points,
    }
    return IngestCounts(
        lines_read=sum(f["lines_read"] for f in stats_files),
        lines_skipped=sum(f["skipped_lines"] for f in stats_files),
        lines_blank=sum(f["blank_lines"] for f in stats_files),
        lines_duplicated=sum(p.duplicated_points for p in parsed.values()),
        report=report,
    )
