"""Issue 29 figures, printed by `make bench` (`python -m bench.parallel [--quick]` alone):

(p) a 1,024-rank job (TP8 x PP8 x DP16, 64 blocks, Megatron's rank order and `layer_number` names, statistics
    reduced over TP x DP as Megatron sets TE's reduction group; about 4 M lines) and one rank with the same number
    of lines, uploaded as tar.gz to the embedded service (SQLite) alternately, upload -> ready, median of 3;
    the service's peak RSS. Target: the job within 3x the single rank.
(q) per-rank fixed costs, in a child process on the same archives: the archive walk (a scan that only drains,
    1,024 members against one of the same bytes), the parse (each member its own parser, against one parse of
    the same lines), what the plan job adds (resolve, digests, assemble + encode of the distinct ranks), the store
    transaction, and the ingest jobs, transactions and files of each run.
(r) the per-rank job path (`SCAN_PARSE_BYTES=0`, each rank a job that reads the archive again: what every rank
    did before) on a 128-rank job of the same ranks (TP8 x PP8 x DP2), seconds a rank, beside the scan path.
(s) the 1,024-rank job on PostgreSQL: one API process and 2 `fp8-policy worker` processes.
(t) toward 16,384 ranks: the JSON size of runs.parallel and ingest_report, resolve() time, and the archive's
    member count against MAX_ARCHIVE_MEMBERS (ARCHITECTURE.md says what would break).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import httpx

from bench.service import ROOT, cluster_env, cpu_seconds, start_service, stop_service, vm_hwm_mb, wait_idle, wait_run
from bench.trees import OUT, write_results

TP, PP, DP, LAYERS = 8, 8, 16, 64
ITERATIONS = 90  # 10 logged iterations x 384 series = 3,840 lines a rank, 3.93 M lines in all
SINGLE_ITERATIONS = 12_790  # one rank of the whole model (3,072 series) x 1,280 iterations = 3.93 M lines
TARGET_RATIO = 3.0


def _metadata(dp: int = DP) -> dict[str, object]:
    return {
        "tensor_model_parallel_size": TP,
        "pipeline_model_parallel_size": PP,
        "num_layers": LAYERS,
        "world_size": TP * PP * dp,
    }


def ensure_archives(out: Path, dp: int = DP) -> tuple[Path, Path]:
    """(the parallel job's tar.gz, the single rank's tar.gz), generated once under `out` (gzip level 6)."""
    from fp8_policy.policy.parallel import ParallelLayout
    from fp8_policy.policy.synthetic.parallel import ParallelJob, write_parallel_job
    from fp8_policy.policy.synthetic.run import SyntheticRun
    from fp8_policy.policy.synthetic.writer import write_run

    job_archive = out / f"parallel_tp{TP}_pp{PP}_dp{dp}.tar.gz"
    single_archive = out / "parallel_single_rank.tar.gz"
    if not job_archive.exists():
        tree = out / job_archive.name.removesuffix(".tar.gz")
        print(f"generating {job_archive.name} ...", flush=True)
        run = SyntheticRun(family="megatron", num_layers=LAYERS, first_index=0, iterations=ITERATIONS, freq=10)
        write_parallel_job(ParallelJob(run, ParallelLayout(tp=TP, pp=PP, dp=dp, num_layers=LAYERS)), tree)
        _pack(tree, job_archive)
    if not single_archive.exists():
        tree = out / "parallel_single_rank"
        print(f"generating {single_archive.name} ...", flush=True)
        run = SyntheticRun(family="megatron", num_layers=LAYERS, first_index=1, iterations=SINGLE_ITERATIONS)
        write_run(run, tree)
        _pack(tree, single_archive)
    return job_archive, single_archive


def _pack(tree: Path, archive: Path) -> None:
    partial = archive.with_suffix(".part")
    with tarfile.open(partial, "w:gz", compresslevel=6) as tar:
        for path in sorted(tree.rglob("*.log")):
            tar.add(path, arcname=str(path.relative_to(tree.parent)))
    partial.rename(archive)


def _upload(client: httpx.Client, archive: Path, metadata: dict[str, object] | None) -> tuple[float, dict]:
    start = time.perf_counter()
    with open(archive, "rb") as handle:
        response = client.post(
            "/api/v1/runs",
            files={"file": (archive.name, handle, "application/gzip")},
            data={"project": f"parallel-{time.time_ns()}", **({"metadata": json.dumps(metadata)} if metadata else {})},
        )
    response.raise_for_status()
    run = wait_run(client, response.json()["id"], 1800, poll=0.05)
    seconds = time.perf_counter() - start
    if run["status"] != "ready":
        raise SystemExit(f"benchmark run failed: {run['error']}")
    return seconds, run


def measure_ready(job: Path, single: Path, work: Path, repeats: int = 3, env: dict[str, str] | None = None) -> dict:
    """(p): the two uploads alternately to one embedded service, after its start-up work; medians and RSS."""
    import os

    service_env = {k: v for k, v in os.environ.items() if k != "FP8_POLICY_DATABASE_URL"} | (env or {})
    server, base = start_service(work, env=service_env)
    try:
        wait_idle(server.pid)
        times: dict[str, list[float]] = {"job": [], "single": []}
        cpu: dict[str, list[float]] = {"job": [], "single": []}
        runs: dict[str, dict] = {}
        with httpx.Client(base_url=base, timeout=600) as client:
            for _ in range(repeats):
                for key, archive, metadata in (("single", single, None), ("job", job, _metadata())):
                    before = cpu_seconds(server.pid)
                    seconds, runs[key] = _upload(client, archive, metadata)
                    cpu[key].append(cpu_seconds(server.pid) - before)
                    times[key].append(seconds)
                    wait_idle(server.pid, quiet=1.5)  # the run's summary, computed after ready, is not counted
        return {
            "job_seconds": statistics.median(times["job"]),
            "single_seconds": statistics.median(times["single"]),
            "job_cpu_seconds": statistics.median(cpu["job"]),
            "single_cpu_seconds": statistics.median(cpu["single"]),
            "times": times,
            "cpu": cpu,
            "service_peak_rss_mb": vm_hwm_mb(server.pid),
            "job": {k: runs["job"][k] for k in ("ranks", "ranks_stored", "series_count", "points", "lines_read")},
            "single": {k: runs["single"][k] for k in ("ranks", "series_count", "points", "lines_read")},
            "job_archive_mb": job.stat().st_size / 1e6,
            "single_archive_mb": single.stat().st_size / 1e6,
        }
    finally:
        stop_service(server)


def measure_costs(job: Path, single: Path) -> dict:
    """(q) in a child process (bench/parallel_steps.py): phase by phase on both archives."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.parallel_steps", "costs", str(job), str(single), json.dumps(_metadata())],
        cwd=ROOT,
        check=True,
        stdout=subprocess.PIPE,
    ).stdout
    return json.loads(out.decode().strip().splitlines()[-1])


def measure_rank_jobs(out: Path, work: Path) -> dict:
    """(r): the 128-rank job through per-rank jobs (what every rank did before) and through the scan."""
    job, _single = ensure_archives(out, dp=2)
    results = {}
    for label, budget in (("rank_jobs", "0"), ("scan", str(128 * 1024**2))):
        import os

        env = {k: v for k, v in os.environ.items() if k != "FP8_POLICY_DATABASE_URL"}
        server, base = start_service(work / label, env={**env, "FP8_POLICY_SCAN_PARSE_BYTES": budget})
        try:
            wait_idle(server.pid)
            before = cpu_seconds(server.pid)
            with httpx.Client(base_url=base, timeout=1800) as client:
                seconds, run = _upload(client, job, _metadata(dp=2))
            results[label] = {
                "seconds": seconds,
                "cpu_seconds": cpu_seconds(server.pid) - before,
                "ranks": run["ranks"],
                "per_rank_ms": 1000 * seconds / run["ranks"],
            }
            wait_idle(server.pid, quiet=1.5)  # its summary, before the service stops
        finally:
            stop_service(server)
    return results


def measure_postgres(job: Path, work: Path) -> dict:
    """(s): the 1,024-rank job on a throwaway PostgreSQL, one API process, 2 workers."""
    from tests.support.cluster import Cluster
    from tests.support.pg_cluster import ThrowawayPostgres

    with ThrowawayPostgres() as pg:
        env = cluster_env(pg, work / "store", 0.1)
        with Cluster(work / "pg", env) as cluster:
            api = cluster.start_api()
            workers = [cluster.start_worker(), cluster.start_worker()]
            cluster.wait_healthy()
            for member in [api, *workers]:
                wait_idle(member.process.pid)
            with httpx.Client(base_url=api.url, timeout=600) as client:
                seconds, run = _upload(client, job, _metadata())
            return {
                "seconds": seconds,
                "ranks": run["ranks"],
                "ranks_stored": run["ranks_stored"],
                "worker_peak_rss_mb": [cluster.peak_rss_mb(m) for m in workers],
                "api_peak_rss_mb": cluster.peak_rss_mb(api),
            }


def measure_16k() -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "bench.parallel_steps", "toward-16k"], cwd=ROOT, check=True, stdout=subprocess.PIPE
    ).stdout
    return json.loads(out.decode().strip().splitlines()[-1])


def measure_all(work: Path, quick: bool = False) -> dict:
    OUT.mkdir(parents=True, exist_ok=True)
    job, single = ensure_archives(OUT)
    print("(p) 1,024 ranks and one rank of the same lines, upload -> ready ...", flush=True)
    results: dict = {"ready": measure_ready(job, single, work / "p", repeats=1 if quick else 3)}
    print("(q) per-rank fixed costs ...", flush=True)
    results["costs"] = measure_costs(job, single)
    print("(r) per-rank jobs against the scan, 128 ranks ...", flush=True)
    results["rank_jobs"] = measure_rank_jobs(OUT, work / "r")
    if not quick:
        print("(s) 1,024 ranks on PostgreSQL, 2 workers ...", flush=True)
        results["postgres"] = measure_postgres(job, work / "s")
    print("(t) toward 16,384 ranks ...", flush=True)
    results["toward_16k"] = measure_16k()
    return results


def report(results: dict) -> dict[str, bool]:
    ready, costs, jobs = results["ready"], results["costs"], results["rank_jobs"]
    ratio = ready["job_seconds"] / ready["single_seconds"]
    job, one = ready["job"], ready["single"]
    print(
        f"(p) 1,024 ranks (TP{TP} x PP{PP} x DP{DP}, {job['lines_read']:,} lines, {ready['job_archive_mb']:.1f} MB)"
        f" upload -> ready: {ready['job_seconds']:6.2f} s; one rank of {one['lines_read']:,} lines"
        f" ({ready['single_archive_mb']:.1f} MB): {ready['single_seconds']:6.2f} s; ratio {ratio:.2f}"
        f" (target <= {TARGET_RATIO:g}); {job['ranks_stored']} of {job['ranks']} ranks stored;"
        f" service peak RSS {ready['service_peak_rss_mb']:.0f} MB"
    )
    print(
        f"    service CPU until ready: 1,024 ranks {ready['job_cpu_seconds']:.2f} s, one rank"
        f" {ready['single_cpu_seconds']:.2f} s (medians; every upload: {ready['times']})"
    )
    for name in ("job", "single"):
        c = costs[name]
        print(
            f"(q) {name:6s}: walk {c['walk_seconds']:.2f} s, scan+parse {c['scan_parse_seconds']:.2f} s,"
            f" plan {c['plan_seconds']:.2f} s, store {c['store_seconds']:.2f} s;"
            f" {c['members']} members, {c['rows_stored']:,} series rows"
        )
    per = costs["per_rank"]
    print(
        f"(q) per rank: archive walk {per['walk_ms']:.2f} ms, parse {per['parse_ms']:.2f} ms,"
        f" plan {per['plan_ms']:.2f} ms; jobs: {per['jobs']}, write transactions: {per['transactions']}"
    )
    print(
        f"(r) 128 ranks through per-rank jobs: {jobs['rank_jobs']['seconds']:.1f} s"
        f" ({jobs['rank_jobs']['per_rank_ms']:.0f} ms a rank, CPU {jobs['rank_jobs']['cpu_seconds']:.1f} s);"
        f" through the scan: {jobs['scan']['seconds']:.2f} s ({jobs['scan']['per_rank_ms']:.1f} ms a rank,"
        f" CPU {jobs['scan']['cpu_seconds']:.1f} s)"
    )
    if "postgres" in results:
        pg = results["postgres"]
        rss = ", ".join(f"{v:.0f}" for v in pg["worker_peak_rss_mb"])
        print(
            f"(s) 1,024 ranks on PostgreSQL, 2 workers: {pg['seconds']:.2f} s, {pg['ranks_stored']} of"
            f" {pg['ranks']} stored; worker peak RSS {rss} MB"
        )
    t = results["toward_16k"]
    print(
        f"(t) 16,384 ranks: runs.parallel {t['parallel_json_kb']:.0f} KB, resolve {t['resolve_seconds']:.2f} s,"
        f" {t['members']:,} members against MAX_ARCHIVE_MEMBERS {t['max_members']:,};"
        f" a 1,024-rank report's files list {costs['job']['report_files_kb']:.0f} KB"
    )
    checks = {
        f"(p) 1,024 ranks ready within {TARGET_RATIO:g}x one rank of the same lines": ratio <= TARGET_RATIO,
        "(p) service peak RSS <= 1024 MB (1,024 ranks)": ready["service_peak_rss_mb"] <= 1024.0,
    }
    if "postgres" in results:
        checks["(s) 1,024 ranks ready on PostgreSQL with 2 workers"] = results["postgres"]["ranks"] == TP * PP * DP
    return checks


def main(argv: list[str] | None = None) -> int:
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m bench.parallel", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one upload each, no PostgreSQL")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fp8-parallel-") as tmp:
        results = measure_all(Path(tmp), quick=args.quick)
    return write_results("parallel", results, report(results))


if __name__ == "__main__":
    raise SystemExit(main())
