"""`RunData` of a synthetic parallel job as the ingest stores it: every rank's logs parsed, named globally, replicas
stored once, replicas that disagree named.

Test side only (the ingest's own pipeline is service/ingest's): each rank's metadata and statistics logs are read
with the project's parsers, the layout is resolved (`resolve`), every rank's names are rewritten by its namer,
ranks whose every series repeats a lower rank's are replicas (not stored), and within each data-parallel group the
ranks that differ from a strict majority are mismatches. The layers come from the stored series and the merged plan
lines (`layer_table`), as an upload's do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fp8_policy.policy.names import split_metric_name
from fp8_policy.policy.parallel import RankEvidence, Resolution, resolve
from fp8_policy.policy.parallel.replicas import group_replicas, rank_digest, replica_mismatches, series_digest
from fp8_policy.policy.parse import kernels
from fp8_policy.policy.parse.assemble import layer_table
from fp8_policy.policy.parse.metadata_log import MetadataLog, merge_metadata, parse_metadata_lines
from fp8_policy.policy.parse.stats_log import StatsLogParser
from fp8_policy.policy.records import MetricName, RunData, Series
from fp8_policy.policy.synthetic.parallel import ParallelJob, WrittenJob, write_parallel_job


@dataclass
class JobData:
    run: RunData
    resolution: Resolution
    written: WrittenJob


def job_run_data(job: ParallelJob, dest: Path, metadata: dict[str, Any] | None = None) -> JobData:
    """Write `job` under `dest` and read it back as the ingest would (metadata: the upload's, e.g. the layout)."""
    written = write_parallel_job(job, dest)
    logs: dict[int, MetadataLog] = {}
    parsed: dict[int, list[tuple[MetricName, Any, Any]]] = {}
    for files in written.files:
        log = parse_metadata_lines(files.metadata_path.read_text())
        parser = StatsLogParser(workers=1)
        with files.stats_path.open("rb") as stream, kernels.forced_compiled():  # numba's cache (tests/conftest.py)
            parser.feed(stream, str(files.stats_path))
            stats = parser.finish()
        known = log.known_layers()
        rank_series = []
        for k, name in enumerate(stats.names):
            metric = split_metric_name(name, known)
            assert metric is not None, name
            iterations, values = stats.series(k)
            rank_series.append((metric, iterations, values))
        logs[files.rank], parsed[files.rank] = log, rank_series
    evidence = {
        rank: RankEvidence(frozenset(m.layer for m, _i, _v in series), logs[rank].parallel)
        for rank, series in parsed.items()
    }
    resolution = resolve(metadata or {}, evidence)
    renamed: dict[int, list[Series]] = {}
    digests: dict[int, bytes] = {}
    for rank, series in parsed.items():
        namer = resolution.namer(rank)
        renamed[rank] = [
            Series(rank, MetricName(namer(m.layer), m.tensor, m.stat, m.recipe, m.columnwise), i, v)
            for m, i, v in series
        ]
        digests[rank] = rank_digest(
            {
                (s.metric.layer, s.metric.tensor, s.metric.stat_key): series_digest(
                    s.iterations.tobytes(), s.values.tobytes()
                )
                for s in renamed[rank]
            }
        )
    info = resolution.info
    info.replicas = group_replicas(digests)
    info.mismatches = list(replica_mismatches(resolution.dense_groups(), digests, "dense layers").mismatches)
    stored = [s for rank, series in renamed.items() if rank not in info.replicas for s in series]
    merged = merge_metadata(_renamed_log(logs[rank], resolution.namer(rank)) for rank in sorted(logs))
    layers = layer_table(((s.metric.layer, s.metric.stat, s.metric.recipe) for s in stored), merged)
    data = RunData(
        layers={layer.info.name: layer.info for layer in layers},
        series=stored,
        metadata=dict(metadata or {}),
        parallel=info,
    )
    return JobData(data, resolution, written)


def _renamed_log(log: MetadataLog, namer: Any) -> MetadataLog:
    out = MetadataLog(assigned=[namer(name) for name in log.assigned], layer_order=[namer(n) for n in log.layer_order])
    for name, plan in log.plans.items():
        plan.layer = namer(name)
        out.plans[plan.layer] = plan
    return out
