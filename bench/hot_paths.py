"""Issue 20 figures: recommendations under concurrent readers, and the memory of concurrent live pieces.

Usage: python -m bench.hot_paths [--points 2400000] [--readers 20] [--rounds 5] [--pieces 12] [--piece-mib 60]

Against the real service (`fp8-policy serve`, SQLite in a throwaway directory, once its start-up work is over)
on loopback:

1. Recommendations: a synthetic run of `--points` statistics points (2 ranks, the planted head-only scenario) is
   uploaded and ingested; then `--readers` clients send GET /recommendation at the same moment, `--rounds` times
   (the first round finds no cached recommendation: every reader waits for the one computation). Figures: p50 and
   p99 over every request, the cold round's slowest request. Target: p99 <= 1 s.
2. Live pieces: `--pieces` live runs each get one piece of `--piece-mib` MiB of statistics lines, all sent at once
   (a 503 TooManyPieces is retried after its Retry-After). The service's resident memory (VmRSS in
   /proc/<pid>/status) is sampled every 20 ms; the figure is its peak minus its value before the pieces.
   Target: <= 300 MB.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import tarfile
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.service import running_service, vm_hwm_mb, wait_idle, wait_run
from bench.trees import write_results
from fp8_policy.policy.synthetic import SCENARIOS, write_run

STATS_PATH = "rank_0/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log"
RECOMMENDATION_P99_TARGET_S = 1.0
PIECES_RSS_TARGET_MB = 300.0


def synthetic_run(tmp: Path, points: int) -> tuple[bytes, Path]:
    """A two-rank head-only run of about `points` statistics lines: (its tar.gz, its rank-0 statistics log)."""
    base = SCENARIOS["head_only"].run
    per_iteration = len(base.metric_cycle())
    steps = max(2, points // (2 * per_iteration))
    run = dataclasses.replace(base, ranks=2, iterations=(steps - 1) * base.freq, seed=20)
    written = write_run(run, tmp / "run")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        for path in sorted(written.root.rglob("*.log")):
            tar.add(path, arcname=str(path.relative_to(written.root)))
    return buffer.getvalue(), written.root / STATS_PATH


def measure_recommendations(base: str, archive: bytes, readers: int, rounds: int) -> dict[str, Any]:
    with httpx.Client(base_url=base, timeout=600) as http:
        posted = http.post(
            "/api/v1/runs",
            files={"file": ("hot-paths.tgz", archive, "application/gzip")},
            data={"project": f"bench-hot-{time.time_ns()}", "name": "recommendation-readers"},
        )
        posted.raise_for_status()
        run = wait_run(http, posted.json()["id"], 900.0, poll=0.25)
    if run["status"] != "ready":
        raise SystemExit(f"the benchmark run did not ingest: {run['status']} {run.get('error')}")
    url = f"{base}/api/v1/runs/{run['id']}/recommendation"
    seconds: list[float] = []
    statuses: list[int] = []
    cold_max = 0.0
    with httpx.Client(timeout=600, limits=httpx.Limits(max_connections=readers)) as http:
        for round_ in range(rounds):
            barrier = threading.Barrier(readers)

            def one(_k: int, barrier: threading.Barrier = barrier) -> tuple[int, float]:
                barrier.wait()
                start = time.perf_counter()
                status = http.get(url).status_code
                return status, time.perf_counter() - start

            with ThreadPoolExecutor(readers) as pool:
                answers = list(pool.map(one, range(readers)))
            statuses += [status for status, _ in answers]
            seconds += [elapsed for _, elapsed in answers]
            if round_ == 0:
                cold_max = max(elapsed for _, elapsed in answers)
    return {
        "run_id": run["id"],
        "points": run["points"],
        "readers": readers,
        "rounds": rounds,
        "requests": len(seconds),
        "non_200": sum(status != 200 for status in statuses),
        "p50_s": float(np.percentile(seconds, 50)),
        "p99_s": float(np.percentile(seconds, 99)),
        "cold_round_max_s": cold_max,
    }


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure_pieces(base: str, pid: int, stats_log: Path, pieces: int, piece_mib: int) -> dict[str, Any]:
    with open(stats_log, "rb") as handle:
        data = handle.read(piece_mib * 1024**2)
    piece = data[: data.rfind(b"\n") + 1]
    with httpx.Client(base_url=base, timeout=600) as http:
        project = f"bench-pieces-{time.time_ns()}"
        runs = [
            http.post("/api/v1/live/runs", json={"project": project, "name": f"piece-{k}"}).json()["id"]
            for k in range(pieces)
        ]
    samples: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(_rss_mb(pid))
            time.sleep(0.02)

    before = _rss_mb(pid)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    refused = 0

    def send(run_id: int) -> tuple[int, float]:
        nonlocal refused
        start = time.perf_counter()
        with httpx.Client(base_url=base, timeout=600) as http:
            while True:
                response = http.put(
                    f"/api/v1/live/runs/{run_id}/files/{STATS_PATH}",
                    params={"offset": 0},
                    content=piece,
                    headers={"content-type": "application/octet-stream"},
                )
                if response.status_code != 503:
                    return response.status_code, time.perf_counter() - start
                refused += 1
                time.sleep(float(response.headers.get("retry-after", "1")))

    start = time.perf_counter()
    with ThreadPoolExecutor(pieces) as pool:
        answers = list(pool.map(send, runs))
    elapsed = time.perf_counter() - start
    stop.set()
    sampler.join()
    peak = max(samples, default=before)
    lines = piece.count(b"\n")
    return {
        "pieces": pieces,
        "piece_mib": len(piece) / 1024**2,
        "statuses": sorted({status for status, _ in answers}),
        "refused_503": refused,
        "seconds": elapsed,
        "lines_per_s": pieces * lines / elapsed,
        "rss_before_mb": before,
        "rss_peak_mb": peak,
        "rss_delta_mb": peak - before,
    }


def run_hot_paths(workdir: Path, *, points: int, readers: int, rounds: int, pieces: int, piece_mib: int) -> dict:
    print(f"generating a synthetic run of ~{points:,} points ...", flush=True)
    archive, stats_log = synthetic_run(workdir / "logs", points)
    results: dict[str, Any] = {}
    with running_service(workdir / "service") as (server, base):
        # the start-up work after /healthz (kernels, scikit-learn's import, parser buffers) is over, as in a service
        # that has been running: the cold round measures readers against the ingest's summary, not the warm-up
        wait_idle(server.pid)
        print(f"{readers} concurrent GET /recommendation x {rounds} rounds ...", flush=True)
        results["recommendation"] = measure_recommendations(base, archive, readers, rounds)
        print(f"{pieces} concurrent live pieces of {piece_mib} MiB ...", flush=True)
        results["pieces"] = measure_pieces(base, server.pid, stats_log, pieces, piece_mib)
        results["service_peak_rss_mb"] = vm_hwm_mb(server.pid)
    return results


def report(results: dict[str, Any]) -> dict[str, bool]:
    rec, pieces = results["recommendation"], results["pieces"]
    print("\nreads and live pieces (issue 20), service on loopback, SQLite")
    print(
        f"  GET /recommendation, {rec['readers']} at once x {rec['rounds']} rounds on a {rec['points']:,}-point run: "
        f"p50 {rec['p50_s']:.3f} s, p99 {rec['p99_s']:.3f} s (cold round's slowest {rec['cold_round_max_s']:.3f} s), "
        f"{rec['non_200']} not 200"
    )
    print(
        f"  {pieces['pieces']} live pieces of {pieces['piece_mib']:.0f} MiB at once: RSS +{pieces['rss_delta_mb']:.0f} MB "
        f"({pieces['rss_before_mb']:.0f} -> {pieces['rss_peak_mb']:.0f} MB), {pieces['seconds']:.1f} s "
        f"({pieces['lines_per_s']:,.0f} lines/s), answers {pieces['statuses']}, {pieces['refused_503']} 503 retried"
    )
    return {
        f"recommendation: {rec['readers']} concurrent p99 <= {RECOMMENDATION_P99_TARGET_S:g} s": rec["non_200"] == 0
        and rec["p99_s"] <= RECOMMENDATION_P99_TARGET_S,
        f"live: {pieces['pieces']} concurrent {pieces['piece_mib']:.0f} MiB pieces RSS +<= {PIECES_RSS_TARGET_MB:g} MB": (
            pieces["statuses"] == [200] and pieces["rss_delta_mb"] <= PIECES_RSS_TARGET_MB
        ),
    }


def measure(
    points: int = 2_400_000, readers: int = 20, rounds: int = 5, pieces: int = 12, piece_mib: int = 60
) -> dict[str, Any]:
    """The issue 20 figures for bench.run (in a throwaway directory)."""
    with tempfile.TemporaryDirectory(prefix="fp8-hot-paths-") as tmp:
        return run_hot_paths(
            Path(tmp), points=points, readers=readers, rounds=rounds, pieces=pieces, piece_mib=piece_mib
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hot_paths", description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=2_400_000)
    parser.add_argument("--readers", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pieces", type=int, default=12)
    parser.add_argument("--piece-mib", type=int, default=60)
    args = parser.parse_args(argv)
    results = measure(args.points, args.readers, args.rounds, args.pieces, args.piece_mib)
    return write_results("hot_paths", results, report(results))


if __name__ == "__main__":
    raise SystemExit(main())
