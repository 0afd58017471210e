"""The eval's ingest path: a synthetic or fixture log tree parsed into RunData exactly as the upload path does."""

from __future__ import annotations

from pathlib import Path

from fp8_policy.policy.parse.assemble import AssembledRun
from fp8_policy.policy.parse.log_files import LogFile, classify_log_path
from fp8_policy.policy.records import RunData, Series
from fp8_policy.service.ingest.parse import parse_files

MAX_LINE_BYTES = 1 << 20


def log_files(tree: Path) -> list[tuple[LogFile, Path]]:
    """The nvdlfw_inspect logs of a tree, classified exactly as bench/steps.py and the upload path do."""
    return [
        (log, path) for path in sorted(tree.rglob("*.log")) if (log := classify_log_path(str(path.relative_to(tree))))
    ]


def run_data(assembled: AssembledRun, metadata: dict[str, object] | None = None) -> RunData:
    """RunData straight from an AssembledRun: layers in model order, one Series per (rank, metric)."""
    layers = {layer.info.name: layer.info for layer in sorted(assembled.layers, key=lambda la: la.position)}
    series = [Series(s.rank, s.metric, s.iterations, s.values) for s in assembled.series]
    return RunData(layers=layers, series=series, metadata=dict(metadata or {}))


def parse_tree(tree: Path, threads: int = 1) -> RunData:
    files = log_files(tree)
    if not files:
        raise FileNotFoundError(f"no nvdlfw_inspect logs under {tree}")
    assembled, _counts = parse_files(files, max_line_bytes=MAX_LINE_BYTES, threads=threads)
    return run_data(assembled)
