"""Issue 10 figures, measured with real processes on loopback (tests/support/cluster.py), printed by `make bench`:

(e) an 8-rank run (the 5.9M-line benchmark log as ranks 0-7: 47M lines, 6.7 GB of logs) uploaded to one
    API process (`serve --no-ingest`) and ingested by 1, then 2 `fp8-policy worker` processes on a throwaway
    PostgreSQL with a job per rank (`SCAN_PARSE_BYTES=0`: what workers share), upload -> ready, peak RSS of each
    worker; and the same run on the embedded service (SQLite, ingest in the API process; its plan job parses the
    ranks itself) with its peak RSS. The 8 ranks are the same log: replicas, stored once (issue 29), so a ready
    run holds one rank's points and counts 8 ranks.
(f) PostgreSQL with 2 API processes and 2 workers: 8 distinct uploads at once and 50 readers for 60 s (the
    runs and the recorder of bench/load.py); p50/p99 per endpoint, 5xx, and runs lost or duplicated (every
    upload must end `ready` once, with exactly the lines and points its generator wrote).
"""

from __future__ import annotations

import shutil
import tarfile
import threading
import time
from pathlib import Path

import httpx
from isal import igzip

from bench.load import P99_TARGET_MS, p99_met, print_endpoints, print_uploads
from bench.service import cluster_env, wait_run
from bench.trees import OUT, parse_target
from tests.support.cluster import Cluster
from tests.support.pg_cluster import ThrowawayPostgres

RANKS = 8
RSS_TARGET_MB = 1024.0
E_RUNS = {  # results key -> label of the (e) runs on PostgreSQL
    "workers_1": "1 worker           ",
    "workers_2": "2 workers          ",
    "workers_1_1thread": "1 worker,  1 thread",
    "workers_2_1thread": "2 workers, 1 thread",
}


def ensure_rank_archive(tree: Path, out: Path, ranks: int = RANKS) -> Path:
    """The benchmark tree's stats and metadata logs as ranks 0..ranks-1 (isal level 1: minutes -> seconds)."""
    archive = out / f"{tree.name}_{ranks}ranks.tar.gz"
    if archive.exists():
        return archive
    stats = next(tree.rglob("nvdlfw_inspect_statistics_logs/*.log"))
    metadata = list(tree.rglob("nvdlfw_inspect_logs/*.log"))
    partial = archive.with_suffix(".part")
    print(f"packing {archive.name} ({ranks} ranks) ...", flush=True)
    with igzip.open(partial, "wb", compresslevel=1) as gz, tarfile.open(fileobj=gz, mode="w|") as tar:
        for rank in range(ranks):
            tar.add(
                stats, arcname=f"run/rank_{rank}/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-{rank}.log"
            )
            for path in metadata[:1]:
                tar.add(path, arcname=f"run/rank_{rank}/nvdlfw_inspect_logs/nvdlfw_inspect_globalrank-{rank}.log")
    partial.rename(archive)
    return archive


def _poll(client: httpx.Client, run_id: int, timeout: float) -> dict:
    run = wait_run(client, run_id, timeout, poll=0.1)
    if run["status"] not in ("ready", "failed"):
        raise SystemExit(f"run {run_id} still {run['status']} after {timeout} s")
    return run


def _upload_until_ready(url: str, archive: Path, project: str) -> tuple[float, dict]:
    with httpx.Client(base_url=url, timeout=600) as client:
        start = time.perf_counter()
        with open(archive, "rb") as handle:
            response = client.post(
                "/api/v1/runs",
                content=handle,
                params={"project": project},
                headers={"Content-Type": "application/gzip"},
            )
        response.raise_for_status()
        run = _poll(client, response.json()["id"], 1800)
        return time.perf_counter() - start, run


def measure_ranks(archive: Path, work: Path, pg: ThrowawayPostgres, workers: int, parse_threads: int = 2) -> dict:
    """(e) one API process, `workers` worker processes (each scanning with `parse_threads` threads), one upload
    of the 8-rank archive."""
    env = {
        **cluster_env(pg, work / f"store-{workers}", 0.2),
        "FP8_POLICY_PARSE_THREADS": str(parse_threads),
        "FP8_POLICY_SCAN_PARSE_BYTES": "0",  # a job per rank, for the workers to share
    }
    with Cluster(work / f"e-{workers}-{parse_threads}", env) as cluster:
        api = cluster.start_api()
        members = [cluster.start_worker() for _ in range(workers)]
        cluster.wait_healthy()
        time.sleep(3.0)  # the workers load the parser kernels
        seconds, run = _upload_until_ready(api.url, archive, f"e-{workers}")
        return {
            "workers": workers,
            "parse_threads": parse_threads,
            "seconds": seconds,
            "status": run["status"],
            "error": run["error"],
            "points": run["points"],
            "ranks": run["ranks"],
            "worker_peak_rss_mb": [cluster.peak_rss_mb(m) for m in members],
            "api_peak_rss_mb": cluster.peak_rss_mb(api),
        }


def measure_embedded(archive: Path, work: Path) -> dict:
    """(e) the same upload to the embedded service: SQLite, ingest inside the API process."""
    with Cluster(work / "e-embedded", {}) as cluster:
        api = cluster.start_api(ingest=True, migrate=True)
        cluster.wait_healthy()
        time.sleep(3.0)
        seconds, run = _upload_until_ready(api.url, archive, "e-embedded")
        return {
            "seconds": seconds,
            "status": run["status"],
            "error": run["error"],
            "points": run["points"],
            "service_peak_rss_mb": cluster.peak_rss_mb(api),
        }


def measure_load(work: Path, pg: ThrowawayPostgres, seconds: float = 60.0, readers: int = 50, uploads: int = 8) -> dict:
    """(f) 2 API processes + 2 workers on PostgreSQL: `uploads` distinct synthetic runs uploaded at once while
    `readers` clients read (list, run, analysis, recommendation) round-robin over both API processes. Uses the
    mixed-load pieces of bench/load.py (runs, recorder)."""
    from bench.load import READER_TARGETS, Recorder, _post, run_window, synthetic_upload, upload_outcome, window_result

    env = cluster_env(pg, work / "store-f", 0.2)
    print(f"generating {READER_TARGETS + uploads} synthetic runs ...", flush=True)
    archives = [synthetic_upload(work / "f-logs", k) for k in range(READER_TARGETS + uploads)]
    seeds, loads = archives[:READER_TARGETS], archives[READER_TARGETS:]
    project = f"f-{time.time_ns()}"
    with Cluster(work / "f", env) as cluster:
        apis = [cluster.start_api(), cluster.start_api()]
        workers = [cluster.start_worker(), cluster.start_worker()]
        cluster.wait_healthy()
        urls = [api.url for api in apis]
        with httpx.Client(base_url=urls[0], timeout=300) as client:
            seeded = [_post(client, upload, f"{project}-seed").json()["id"] for upload in seeds]
            targets = [wait_run(client, run_id, 300)["id"] for run_id in seeded]
        paths = {
            "list": lambda k: "/api/v1/runs?limit=50",
            "run": lambda k: f"/api/v1/runs/{targets[k % len(targets)]}",
            "analysis": lambda k: f"/api/v1/runs/{targets[k % len(targets)]}/analysis",
            "recommendation": lambda k: f"/api/v1/runs/{targets[k % len(targets)]}/recommendation",
        }
        order = list(paths)
        recorder = Recorder()
        stop = threading.Event()
        answered: dict[str, tuple[int, int | None]] = {}

        def reader(k: int) -> None:
            with httpx.Client(base_url=urls[k % len(urls)], timeout=120) as client:
                n = k
                while not stop.is_set():
                    endpoint, path = order[n % len(order)], paths[order[n % len(order)]](n)
                    recorder.call(endpoint, lambda path=path: client.get(path))
                    n += 1

        def uploader(k: int, upload) -> None:
            with httpx.Client(base_url=urls[k % len(urls)], timeout=300) as client:
                response = recorder.call("upload", lambda: _post(client, upload, project))
                ok = response is not None and response.status_code == 202
                answered[upload.name] = (
                    response.status_code if response is not None else 0,
                    response.json()["id"] if ok else None,
                )

        window = run_window(reader, readers, uploader, loads, seconds, stop)
        results = []
        with httpx.Client(base_url=urls[1], timeout=120) as client:
            for upload in loads:
                status, run_id = answered.get(upload.name, (0, None))
                run = wait_run(client, run_id, 600) if run_id is not None else {}
                results.append(upload_outcome(upload, status, run))
            listed = _all_runs(client, project)
        alive = all(m.process.poll() is None for m in apis + workers)
        worker_rss = [Cluster.peak_rss_mb(m) for m in workers] if alive else None
    accepted = [r for r in results if r["http_status"] == 202]
    return {
        **window_result(window, readers, results, recorder),
        "accepted": len(accepted),
        "runs_lost": len(loads) - sum(r["exact"] for r in results),
        "runs_duplicated": max(0, len(listed) - len(accepted)),
        "processes_alive": alive,
        "worker_peak_rss_mb": worker_rss,
    }


def _all_runs(client: httpx.Client, project: str) -> list[dict]:
    runs, cursor = [], None
    while True:
        params = {"project": project, "limit": 200, **({"cursor": cursor} if cursor else {})}
        page = client.get("/api/v1/runs", params=params).json()
        runs += page["items"]
        cursor = page.get("next_cursor")
        if not cursor:
            return runs


def measure_all(tree: Path, out: Path, work: Path, load_seconds: float = 60.0) -> dict:
    archive = ensure_rank_archive(tree, out)
    stats = next(tree.rglob("nvdlfw_inspect_statistics_logs/*.log"))
    with open(stats, "rb") as handle:  # every line of the benchmark log is one point
        expected = sum(1 for _ in handle)  # the 8 ranks are replicas of one another: one rank's points are stored
    results: dict = {"archive_mb": archive.stat().st_size / 1e6, "expected_points": expected}
    with ThrowawayPostgres() as pg:
        for workers in (1, 2):
            print(f"(e) 8 ranks, {workers} worker(s) ...", flush=True)
            results[f"workers_{workers}"] = measure_ranks(archive, work, pg, workers)
            shutil.rmtree(work / f"store-{workers}", ignore_errors=True)
        # The default worker already keeps both cores of this machine busy (2 scan threads + decompression), so a
        # second one has no core to add; with one scan thread each, the speed-up of a second worker shows.
        for workers in (1, 2):
            print(f"(e) 8 ranks, {workers} worker(s), 1 scan thread each ...", flush=True)
            results[f"workers_{workers}_1thread"] = measure_ranks(archive, work, pg, workers, parse_threads=1)
            shutil.rmtree(work / f"store-{workers}", ignore_errors=True)
        print(
            f"(f) load: 2 API + 2 workers on PostgreSQL, 8 uploaders + 50 readers, {load_seconds:.0f} s ...", flush=True
        )
        results["load"] = measure_load(work, pg, load_seconds)
    print("(e) 8 ranks on the embedded service ...", flush=True)
    results["embedded"] = measure_embedded(archive, work)
    return results


def report(scale: dict, baseline_seconds: float, single_upload_seconds: float) -> dict[str, bool]:
    """Print (a), (e), (f); return the target checks."""
    ratio = baseline_seconds / single_upload_seconds
    print(
        f"(a) single rank upload -> ready          : {single_upload_seconds:7.2f} s   baseline {baseline_seconds:.2f} s"
        f"   {ratio:5.1f}x (target >= 20x)"
    )
    for key, label in E_RUNS.items():
        e = scale[key]
        rss = ", ".join(f"{v:.0f}" for v in e["worker_peak_rss_mb"])
        print(
            f"(e) 8 ranks x 5.9M lines, {label}: {e['seconds']:7.2f} s   {e['status']}"
            f"   {e['points']:,} points   worker peak RSS {rss} MB   API {e['api_peak_rss_mb']:.0f} MB"
        )
    one, two = scale["workers_1_1thread"]["seconds"], scale["workers_2_1thread"]["seconds"]
    print(f"    a second worker (1 scan thread each): {one / two:.2f}x faster")
    em = scale["embedded"]
    print(
        f"(e) 8 ranks on the embedded service      : {em['seconds']:7.2f} s   {em['status']}"
        f"   peak RSS {em['service_peak_rss_mb']:.0f} MB"
    )
    f = scale["load"]
    rss = ", ".join(f"{v:.0f}" for v in f["worker_peak_rss_mb"] or [])
    print(
        f"(f) PostgreSQL, 2 API + 2 workers, {len(f['uploads'])} concurrent uploads + {f['readers']} readers,"
        f" {f['seconds']:.0f} s: 5xx {f['server_5xx']}, transport errors {f['transport_errors']},"
        f" runs lost {f['runs_lost']}, duplicated {f['runs_duplicated']}; worker peak RSS {rss} MB"
    )
    print_endpoints(f["endpoints"])
    print_uploads(f["uploads"])
    points = scale["expected_points"]
    return {
        "(a) single rank upload -> ready >= 20x the baseline": ratio >= 20.0,
        "(e) 8 ranks ready with 1 and 2 workers, every point (replicas once)": all(
            scale[key]["status"] == "ready" and scale[key]["points"] == points and scale[key]["ranks"] == RANKS
            for key in E_RUNS
        ),
        f"(e) worker peak RSS <= {RSS_TARGET_MB:.0f} MB": all(
            v <= RSS_TARGET_MB for key in E_RUNS for v in scale[key]["worker_peak_rss_mb"]
        ),
        f"(e) embedded service peak RSS <= {RSS_TARGET_MB:.0f} MB (8 ranks)": em["service_peak_rss_mb"]
        <= RSS_TARGET_MB,
        f"(f) every endpoint p99 <= {P99_TARGET_MS / 1000:g} s": p99_met(f["endpoints"]),
        "(f) no 5xx, no run lost or duplicated": f["server_5xx"] == 0
        and f["transport_errors"] == 0
        and f["runs_lost"] == 0
        and f["runs_duplicated"] == 0
        and f["processes_alive"],
    }


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.scale [--target small] [--load-seconds N]`: (e) and (f) alone, e.g. to develop them small
    (the single-rank upload -> ready against the baseline alone: `python -m bench.single`)."""
    import argparse
    import json
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=main.__doc__)
    parser.add_argument("--load-seconds", type=float, default=60.0)
    args, tree = parse_target(parser, argv)
    with tempfile.TemporaryDirectory(prefix="fp8-scale-") as tmp:
        results = measure_all(tree, OUT, Path(tmp), args.load_seconds)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
