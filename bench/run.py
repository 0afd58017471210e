"""`make bench`: the four ingest figures of the 6M-line run, measured side by side in one run.

(a) parse+store from the directory (fresh process, fresh SQLite; the kernels are loaded first, as
    the service does at start-up), (b) HTTP upload of the tar.gz to a real uvicorn service until the
    run is `ready`, (c) peak RSS of that service process, (d) the baseline: a line-by-line `re.match`
    parser into a pandas DataFrame plus the gradient-underflow pivot (bench/baseline.py).
(h) the mixed load of bench/load.py: 30 readers (runs list, analysis, recommendation) and 8 uploads for 60 s
    against `fp8-policy serve` on SQLite: p50/p99 per endpoint, no 5xx, every upload `ready` with exact counts
    (`python -m bench.load --seconds 15` runs it alone).
Issue 10 (bench/scale.py): the single-rank upload -> ready of (b) against the baseline (d) as a ratio; (e) an
8-rank run with 1 and 2 `fp8-policy worker` processes on PostgreSQL and on the embedded service, with peak RSS;
(f) 2 API processes + 2 workers on PostgreSQL under 8 uploads and 50 readers (`python -m bench.scale`).
(k) bench/hot_paths.py (issue 20): 20 concurrent GET /recommendation on a 2.4M-point run (p99), and the service's
RSS growth under 12 concurrent 60 MiB live pieces (`python -m bench.hot_paths` alone).
(l) bench/floods.py (issue 30): an unrelated GET's p99 while 12 clients flood with recomputes of new thresholds,
scalar reads of new limits, oversized model dims and oversized bodies, and the service's peak RSS
(`python -m bench.floods` alone).
(j) bench/first_touch.py: `fp8-policy serve` from an empty numba cache and restarted with a warm one, side by side:
/healthz, the ESM-2 fixture's upload -> ready, SIGTERM -> exit (`python -m bench.first_touch [--make-run]` alone).
Issue 29 (bench/parallel.py): (p) a 1,024-rank job (TP8 x PP8 x DP16, 64 blocks, 3.9 M lines) and one rank of the
same lines, upload -> ready side by side; (q) per-rank fixed costs; (r) per-rank jobs against the scan; (s) the
job on PostgreSQL with 2 workers; (t) sizes toward 16,384 ranks (`python -m bench.parallel` alone).
Each measurement runs in its own process, so peak RSS figures are per process (os.wait4 / VmHWM).
Results are printed as a table and written to bench/out/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import httpx

import bench.hot_paths as hot_paths
from bench import first_touch, floods, live, load, parallel, scale
from bench.service import start_service, stop_service, vm_hwm_mb, wait_idle
from bench.trees import OUT, ROOT, parse_target, print_targets

TARGETS = {"parse_store_speedup": 15.0, "upload_seconds": 10.0, "service_rss_mb": 1024.0, "csv_rows_per_second": 2e6}


def _run_child(args: list[str], env: dict | None = None) -> tuple[dict, float, float]:
    """Run a Python child that prints one JSON line; returns (its JSON, wall seconds, peak RSS MB)."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=subprocess.PIPE, env=env)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"benchmark step {args} failed with exit code {proc.returncode}")
    return json.loads(out.decode().strip().splitlines()[-1]), wall, usage.ru_maxrss / 1024


def ensure_archive(tree: Path) -> Path:
    archive = tree.with_suffix(".tar.gz")
    if not archive.exists():
        print(f"packing {archive.name} ...", flush=True)
        with tarfile.open(archive, "w:gz", compresslevel=6) as tar:
            for path in sorted(tree.rglob("*.log")):
                tar.add(path, arcname=str(path.relative_to(tree.parent)))
    return archive


def measure_baseline(tree: Path) -> dict:
    result, wall, rss = _run_child(["-m", "bench.steps", "baseline", str(tree)])
    return {"seconds": result["seconds"], "wall_seconds": wall, "peak_rss_mb": rss, "rows": result["rows"]}


def measure_parse_store(tree: Path, workdir: Path) -> dict:
    url = f"sqlite:///{workdir / 'parse_store.db'}"
    result, wall, rss = _run_child(["-m", "bench.steps", "parse-store", str(tree), url])
    return {**result, "wall_seconds": wall, "peak_rss_mb": rss}


def measure_upload(archive: Path, workdir: Path) -> dict:
    """Start the real service (uvicorn) on loopback, upload, poll until ready, read its peak RSS."""
    server, base = start_service(workdir / "service")
    try:
        with httpx.Client(base_url=base, timeout=120) as client:
            wait_idle(
                server.pid
            )  # the start-up work after /healthz (kernels, buffers) is over, as in a running service
            rss_before = vm_hwm_mb(server.pid)
            start = time.perf_counter()
            with open(archive, "rb") as handle:
                response = client.post(
                    "/api/v1/runs",
                    files={"file": (archive.name, handle, "application/gzip")},
                    data={"name": "bench-6m", "project": f"bench-{time.time_ns()}"},
                )
            response.raise_for_status()
            run = _poll_ready(client, response.json()["id"])
            seconds = time.perf_counter() - start
            analysis = _time_get(client, f"/api/v1/runs/{run['id']}/analysis")
            csv_figures = {layout: _time_csv(client, run["id"], layout) for layout in ("long", "bionemo")}
        return {
            "seconds": seconds,
            "service_peak_rss_mb": vm_hwm_mb(server.pid),
            "idle_rss_mb": rss_before,
            "archive_mb": archive.stat().st_size / 1e6,
            "points": run["points"],
            "status": run["status"],
            "analysis_http_seconds": analysis,
            "run_id": run["id"],
            "csv": csv_figures,
            "database_url": f"sqlite:///{workdir / 'service' / 'fp8_policy.db'}",
        }
    finally:
        stop_service(server)


def _poll_ready(client: httpx.Client, run_id: int) -> dict:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        run = client.get(f"/api/v1/runs/{run_id}").json()
        if run["status"] in ("ready", "failed"):
            if run["status"] == "failed":
                raise SystemExit(f"benchmark run failed: {run['error']}")
            return run
        time.sleep(0.05)
    raise SystemExit("benchmark run not ready after 300 s")


def _time_csv(client: httpx.Client, run_id: int, layout: str) -> dict:
    """(g) GET metrics.csv streamed over HTTP: rows (data lines) per second, bytes, and the client never holds it."""
    start = time.perf_counter()
    rows, size = -1, 0  # the header line is not a row
    with client.stream("GET", f"/api/v1/runs/{run_id}/metrics.csv", params={"layout": layout}) as response:
        response.raise_for_status()
        for chunk in response.iter_raw(1 << 20):
            rows += chunk.count(b"\n")
            size += len(chunk)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "rows": rows, "mb": size / 1e6, "rows_per_second": rows / seconds}


def measure_csv_baseline(database_url: str, run_id: int) -> dict:
    """(g) baseline: the previous export, Python's csv module formatting every value, on the same stored run."""
    result, wall, rss = _run_child(["-m", "bench.steps", "csv-python", database_url, str(run_id)])
    return {**result, "wall_seconds": wall, "peak_rss_mb": rss}


def _time_get(client: httpx.Client, path: str) -> float | None:
    start = time.perf_counter()
    response = client.get(path)
    if response.status_code == 404:
        return None  # endpoint not present in this build
    response.raise_for_status()
    return time.perf_counter() - start


def report(results: dict) -> None:
    base, ps, up = results["baseline"], results["parse_store"], results["upload"]
    speedup = base["seconds"] / ps["seconds"]
    results["ratios"] = {
        "parse_store_speedup": speedup,
        "rss_ratio_baseline_vs_service": base["peak_rss_mb"] / up["service_peak_rss_mb"],
    }
    checks = {
        f"(a) parse+store >= {TARGETS['parse_store_speedup']:.0f}x faster than (d)": speedup
        >= TARGETS["parse_store_speedup"],
        f"(b) upload until ready < {TARGETS['upload_seconds']:.0f} s": up["seconds"] < TARGETS["upload_seconds"],
        f"(c) service peak RSS < {TARGETS['service_rss_mb']:.0f} MB": up["service_peak_rss_mb"]
        < TARGETS["service_rss_mb"],
        "analysis of the stored 6M run < 2 s": ps["analysis_seconds"] < 2.0,
        "heatmap of the stored 6M run < 2 s": ps["heatmap_seconds"] < 2.0,
        f"(g) metrics.csv >= {TARGETS['csv_rows_per_second'] / 1e6:.0f} M rows/s, both layouts": min(
            c["rows_per_second"] for c in up["csv"].values()
        )
        >= TARGETS["csv_rows_per_second"],
        "(g) metrics.csv holds every point": all(c["rows"] == up["points"] for c in up["csv"].values()),
    }
    results["targets_met"] = {k: bool(v) for k, v in checks.items()}
    print()
    print(f"log: {results['lines']:,} lines, {results['log_mb']:.0f} MB; archive {up['archive_mb']:.1f} MB")
    print(
        f"(d) baseline regex -> DataFrame -> pivot : {base['seconds']:7.2f} s   peak RSS {base['peak_rss_mb']:7.0f} MB"
    )
    print(
        f"(a) parse+store from the directory      : {ps['seconds']:7.2f} s   peak RSS {ps['peak_rss_mb']:7.0f} MB"
        f"   (parse {ps['parse_seconds']:.2f} s, store {ps['store_seconds']:.2f} s, {ps['bytes_per_point']:.2f} B/point)"
    )
    print(f"(b) HTTP upload of the tar.gz until ready: {up['seconds']:7.2f} s")
    print(
        f"(c) service peak RSS                     : {up['service_peak_rss_mb']:7.0f} MB (idle {up['idle_rss_mb']:.0f} MB)"
    )
    print(f"    analysis from stored data            : {ps['analysis_seconds']:7.2f} s   (target < 2 s)")
    print(f"    heatmap PNG from stored data         : {ps['heatmap_seconds']:7.2f} s   (target < 2 s)")
    if up.get("analysis_http_seconds") is not None:
        print(f"    GET /analysis over HTTP              : {up['analysis_http_seconds']:7.2f} s")
    for layout, c in up["csv"].items():
        print(
            f"(g) GET metrics.csv ({layout:7s}) over HTTP : {c['seconds']:7.2f} s   {c['rows_per_second'] / 1e6:5.2f} M rows/s"
            f"   ({c['rows']:,} rows, {c['mb']:.0f} MB)"
        )
    cb = results.get("csv_baseline")
    if cb:
        print(
            f"    baseline: csv module, in process      : {cb['seconds']:7.2f} s   {cb['rows_per_second'] / 1e6:5.2f} M rows/s"
            f"   (long layout, no HTTP)"
        )
    print(f"ratio (d)/(a): {speedup:.1f}x")
    print_targets(checks)


def _add_targets(results: dict, targets: dict[str, bool]) -> None:
    """Another benchmark's targets, printed and kept in `results["targets_met"]`."""
    results["targets_met"].update(targets)
    print_targets(targets)


def _line_count(path: Path) -> int:
    with path.open("rb") as fh:  # streamed: the logs can be larger than memory
        return sum(1 for _ in fh)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    _, tree = parse_target(parser, argv)
    archive = ensure_archive(tree)
    stats_files = list(tree.rglob("nvdlfw_inspect_statistics_logs/*.log"))
    lines = sum(_line_count(path) for path in stats_files)
    results = {"lines": lines, "log_mb": sum(p.stat().st_size for p in stats_files) / 1e6}
    with tempfile.TemporaryDirectory(prefix="fp8-bench-") as tmp:
        work = Path(tmp)
        print("(d) baseline ...", flush=True)
        results["baseline"] = measure_baseline(tree)
        print("(a) parse+store ...", flush=True)
        results["parse_store"] = measure_parse_store(tree, work)
        print("(b)+(c) HTTP upload to the service ...", flush=True)
        results["upload"] = measure_upload(archive, work)
        print("(g) baseline csv export ...", flush=True)
        results["csv_baseline"] = measure_csv_baseline(results["upload"]["database_url"], results["upload"]["run_id"])
    print("(h) mixed load: readers and uploads at once ...", flush=True)
    results["mixed_load"] = load.run_load()
    with tempfile.TemporaryDirectory(prefix="fp8-scale-") as tmp:
        results["scale"] = scale.measure_all(tree, OUT, Path(tmp))
    print("(i) live runs: append throughput, detector latency, planted crossing to webhook ...", flush=True)
    results["live"] = live.measure(tree)
    print("(k) recommendations under 20 concurrent readers, 12 concurrent 60 MiB live pieces ...", flush=True)
    results["hot_paths"] = hot_paths.measure()
    print("(l) floods of cheap requests: an unrelated request's latency, peak RSS ...", flush=True)
    results["floods"] = floods.measure()
    with tempfile.TemporaryDirectory(prefix="fp8-parallel-") as tmp:
        results["parallel"] = parallel.measure_all(Path(tmp))
    print("(j) first touch: cold start (empty numba cache) and warm restart ...", flush=True)
    results["first_touch"] = first_touch.measure_cold_and_warm()
    report(results)
    load.report(results["mixed_load"])
    _add_targets(results, load.targets_met(results["mixed_load"]))
    print()
    _add_targets(results, scale.report(results["scale"], results["baseline"]["seconds"], results["upload"]["seconds"]))
    _add_targets(results, live.report(results["live"], results["baseline"]["seconds"]))
    _add_targets(results, hot_paths.report(results["hot_paths"]))
    _add_targets(results, floods.report(results["floods"]))
    print()
    _add_targets(results, parallel.report(results["parallel"]))
    print()
    first_touch.print_table(results["first_touch"])
    for label, ok in results["first_touch"]["met"].items():
        results["targets_met"][f"(j) first touch {label} <= {first_touch.TARGETS[label]:g}"] = ok
        print(f"  [{'ok' if ok else 'MISSED'}] (j) first touch {label} <= {first_touch.TARGETS[label]:g}")
    (OUT / "results.json").write_text(json.dumps(results, indent=2))
    return 0 if all(results["targets_met"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
