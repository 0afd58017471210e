"""Child-process steps of bench/parallel.py (each prints one JSON line): `costs JOB SINGLE METADATA`, `toward-16k`.

`costs` runs the plan job's pieces (service/ingest/pipeline.py plan_run) one at a time on both archives, with the
compiled kernels loaded as a service has them: the archive walk alone (a scan whose members are only drained), the
scan with every rank parsed (ScanRanks), the plan (resolve, digests, assemble and encode of the distinct ranks),
and its store transaction on a fresh SQLite file. `toward-16k` sizes what grows with ranks at 16,384 of them.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _plan_pieces(archive: Path, metadata: dict[str, Any], url: str) -> dict[str, Any]:
    from fp8_policy.db.jobs import JobRepository
    from fp8_policy.db.rank_store import RankStore
    from fp8_policy.db.runs import NewRun, RunRepository
    from fp8_policy.db.session import create_db_engine, create_session_factory, session_scope
    from fp8_policy.service.ingest.archive.stream import scan_archive
    from fp8_policy.service.ingest.pipeline import extract_limits
    from fp8_policy.service.ingest.plan_ranks import plan_ranks
    from fp8_policy.service.ingest.rank_parse import MetadataReader
    from fp8_policy.service.ingest.scan_ranks import ScanRanks
    from fp8_policy.service.settings import Settings

    settings = Settings(_env_file=None)
    limits, size = extract_limits(settings), archive.stat().st_size
    start = time.perf_counter()
    with open(archive, "rb") as src:
        scan_archive(src, size, limits, archive.name)
    walk = time.perf_counter() - start

    reader, ranks = MetadataReader(), ScanRanks(settings)
    start = time.perf_counter()
    with open(archive, "rb") as src:
        scan = scan_archive(src, size, limits, archive.name, reader.read, ranks.feed)
    scan_parse = time.perf_counter() - start
    start = time.perf_counter()
    ranks.settle(scan.stats)
    planned = plan_ranks(metadata, scan, ranks, reader)
    plan = time.perf_counter() - start

    factory = create_session_factory(create_db_engine(url))
    with session_scope(factory) as session:
        run_id = RunRepository(session).add(NewRun("bench", "bench", (), {}, "0" * 64, None, 0, "")).id
    start = time.perf_counter()
    with session_scope(factory) as session:  # what the plan job's one write transaction does
        JobRepository(session).add_rank_jobs(run_id, sorted(scan.stats), done=planned.results, finalized=True)
        RankStore(session).store_ranks(run_id, planned.stored)
    store = time.perf_counter() - start
    pending = len(planned.pending)
    files = [f for r in planned.results.values() for f in r["files"]] + reader.reports(scan.metadata)
    return {
        "walk_seconds": walk,
        "scan_parse_seconds": scan_parse,
        "plan_seconds": plan,
        "store_seconds": store,
        "members": sum(len(v) for v in scan.stats.values()) + len(scan.metadata),
        "ranks": len(scan.stats),
        "ranks_stored": len(planned.stored),
        "rows_stored": sum(len(v) for v in planned.stored.values()),
        "pending": pending,
        # jobs a worker claims: the plan, then a job per rank it left and the finalize when it left any
        "jobs": 1 + pending + (1 if pending else 0),
        # a claim and a store per job (the plan job also marks the run processing first)
        "transactions": 3 + 2 * pending + (2 if pending else 0),
        "report_files_kb": len(json.dumps(files)) / 1024,
    }


def costs(job: Path, single: Path, metadata: dict[str, Any]) -> dict[str, Any]:
    from fp8_policy.db.migrate import upgrade
    from fp8_policy.service.ingest.worker import warm_parser

    warm_parser()  # the compiled kernels, as `fp8-policy serve` loads them at start-up
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="fp8-costs-") as tmp:
        for name, archive, meta in (("single", single, {}), ("job", job, metadata)):
            url = f"sqlite+pysqlite:///{Path(tmp) / name}.db"
            upgrade(url)
            out[name] = _plan_pieces(archive, meta, url)
    j, s = out["job"], out["single"]
    n = j["ranks"]
    out["per_rank"] = {
        "walk_ms": 1000 * (j["walk_seconds"] - s["walk_seconds"]) / n,
        "parse_ms": 1000
        * ((j["scan_parse_seconds"] - j["walk_seconds"]) - (s["scan_parse_seconds"] - s["walk_seconds"]))
        / n,
        "plan_ms": 1000 * (j["plan_seconds"] - s["plan_seconds"]) / n,
        "store_ms": 1000 * (j["store_seconds"] - s["store_seconds"]) / n,
        "jobs": j["jobs"],
        "transactions": j["transactions"],
        "files": j["members"],
    }
    return out


def toward_16k(tp: int = 8, pp: int = 8, dp: int = 256, layers: int = 64) -> dict[str, Any]:
    """runs.parallel of a 16,384-rank job (TP8 x PP8 x DP256) whose DP replicas agree, and resolve()'s time."""
    from fp8_policy.policy.parallel import RankEvidence, resolve
    from fp8_policy.policy.parallel.replicas import group_replicas
    from fp8_policy.service.settings import Settings

    world = tp * pp * dp
    per_stage = layers // pp
    gemms = ("self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2")
    stage_names = [
        frozenset(f"model.module.decoder.layers.{p * per_stage + i + 1}.{g}" for i in range(per_stage) for g in gemms)
        for p in range(pp)
    ]
    metadata = {
        "tensor_model_parallel_size": tp,
        "pipeline_model_parallel_size": pp,
        "num_layers": layers,
        "world_size": world,
    }
    evidence = {}
    for rank in range(world):
        tp_rank, pp_rank = rank % tp, rank // (tp * dp)
        evidence[rank] = RankEvidence(stage_names[pp_rank], digest=bytes([tp_rank, pp_rank]) * 8)
    start = time.perf_counter()
    resolution = resolve(metadata, evidence)
    seconds = time.perf_counter() - start
    resolution.info.replicas = group_replicas({r: e.digest for r, e in evidence.items() if e.digest is not None})
    text = json.dumps(resolution.info.to_json())
    return {
        "ranks": world,
        "resolve_seconds": seconds,
        "parallel_json_kb": len(text) / 1024,
        "replicas": len(resolution.info.replicas),
        "members": 2 * world,
        "max_members": Settings(_env_file=None).max_archive_members,
    }


def main() -> None:
    step = sys.argv[1]
    if step == "costs":
        result = costs(Path(sys.argv[2]), Path(sys.argv[3]), json.loads(sys.argv[4]))
    elif step == "toward-16k":
        result = toward_16k()
    else:
        raise SystemExit(f"unknown step {step!r}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
