"""Issue 30 figures: an unrelated request's latency while cheap requests flood the service, and its peak memory.

Usage: python -m bench.floods [--points 600000] [--scalars-mib 16] [--seconds 15] [--clients 12]

Against the real service (`fp8-policy serve`, SQLite in a throwaway directory, once its start-up work is over) on
loopback, with one synthetic run of `--points` statistics points and a `scalars.jsonl` of `--scalars-mib` MiB:
a probe sends GET /api/v1/runs/{id} every 100 ms (the unrelated request) while `--clients` clients flood, for
`--seconds` each, with one kind of cheap request at a time:
* recompute: POST .../recommendation, each with thresholds no one asked for before (a full analysis each; the
  analysis lane answers 429 beyond its places, service/lanes.py);
* scalars: GET .../scalars, each with another `limit` (one parse of the file, then slices);
* dims: POST .../recommendation with `{"model_dims": {"num_layers": 10**18}}` (400);
* bodies: POST .../recommendation with 16 MiB chunked bodies (413 after the first MiB).
The first row is the probe alone (the baseline, same run). Figures per row: the probe's p50 / p99 / max, the flood
requests' answers by status, and at the end the service's peak resident memory (VmHWM).
Targets (issue 30): probe p99 <= 2 s under every flood, no 5xx, peak RSS <= 1024 MB.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import tarfile
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.service import running_service, vm_hwm_mb, wait_idle, wait_run
from bench.trees import write_results
from fp8_policy.policy.synthetic import SCENARIOS, write_run

PROBE_P99_TARGET_S = 2.0
RSS_TARGET_MB = 1024.0
PROBE_EVERY_S = 0.1


def archive(tmp: Path, points: int, scalars_mib: int) -> bytes:
    """A two-rank synthetic run of about `points` statistics points with a scalars.jsonl of `scalars_mib` MiB."""
    base = SCENARIOS["head_only"].run
    steps = max(2, points // (2 * len(base.metric_cycle())))
    run = dataclasses.replace(base, ranks=2, iterations=(steps - 1) * base.freq, seed=30)
    written = write_run(run, tmp / "run")
    lines, step = [], 0
    size = 0
    while size < scalars_mib * 1024**2:
        line = json.dumps({"step": step, "loss": 2.0 + 1.0 / (step + 1), "grad_norm": 0.8, "lr": 3e-4}) + "\n"
        lines.append(line)
        size += len(line)
        step += 1
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        for path in sorted(written.root.rglob("*.log")):
            tar.add(path, arcname=str(path.relative_to(written.root)))
        data = "".join(lines).encode()
        info = tarfile.TarInfo("scalars.jsonl")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _chunks(total: int) -> Iterator[bytes]:
    piece = b" " * 65536
    for _ in range(total // len(piece)):
        yield piece


def floods(base: str, run_id: int) -> dict[str, Callable[[httpx.Client, int], int]]:
    rec = f"/api/v1/runs/{run_id}/recommendation"
    return {
        "recompute": lambda http, k: http.post(rec, json={"thresholds": {"critical": 2.0 + k * 1e-4}}).status_code,
        "scalars": lambda http, k: (
            http.get(f"/api/v1/live/runs/{run_id}/scalars", params={"limit": 1000 + k}).status_code
        ),
        "dims": lambda http, k: http.post(rec, json={"model_dims": {"num_layers": 10**18}}).status_code,
        "bodies": lambda http, k: (
            http.post(rec, content=_chunks(16 * 1024**2), headers={"content-type": "application/json"}).status_code
        ),
    }


def measure_flood(
    base: str, run_id: int, name: str, flood: Callable[[httpx.Client, int], int] | None, clients: int, seconds: float
) -> dict[str, Any]:
    stop = threading.Event()
    probe_seconds: list[float] = []
    probe_statuses: Counter[int] = Counter()
    answers: Counter[int] = Counter()
    counter = iter(range(10**9))
    lock = threading.Lock()

    def probe() -> None:
        with httpx.Client(base_url=base, timeout=120) as http:
            while not stop.is_set():
                start = time.perf_counter()
                probe_statuses[http.get(f"/api/v1/runs/{run_id}").status_code] += 1
                probe_seconds.append(time.perf_counter() - start)
                stop.wait(max(0.0, PROBE_EVERY_S - (time.perf_counter() - start)))

    def flooder(_: int) -> None:
        assert flood is not None
        with httpx.Client(base_url=base, timeout=120) as http:
            while not stop.is_set():
                with lock:
                    k = next(counter)
                try:
                    status = flood(http, k)
                except httpx.TransportError:  # a refused body's connection is closed under the sender
                    status = 0
                with lock:
                    answers[status] += 1

    prober = threading.Thread(target=probe)
    prober.start()
    with ThreadPoolExecutor(max(1, clients)) as pool:
        running = [pool.submit(flooder, c) for c in range(clients)] if flood is not None else []
        time.sleep(seconds)
        stop.set()
        for future in running:
            future.result()
    prober.join()
    return {
        "flood": name,
        "clients": clients if flood is not None else 0,
        "probe_requests": len(probe_seconds),
        "probe_not_200": sum(n for status, n in probe_statuses.items() if status != 200),
        "probe_p50_s": float(np.percentile(probe_seconds, 50)),
        "probe_p99_s": float(np.percentile(probe_seconds, 99)),
        "probe_max_s": max(probe_seconds),
        "answers": {str(status): n for status, n in sorted(answers.items())},
    }


def run_floods(workdir: Path, *, points: int, scalars_mib: int, seconds: float, clients: int) -> dict[str, Any]:
    print(f"generating a synthetic run of ~{points:,} points and {scalars_mib} MiB of scalars ...", flush=True)
    body = archive(workdir / "logs", points, scalars_mib)
    results: dict[str, Any] = {"points": points, "scalars_mib": scalars_mib, "seconds": seconds, "rows": []}
    with running_service(workdir / "service") as (server, base):
        wait_idle(server.pid)
        with httpx.Client(base_url=base, timeout=900) as http:
            posted = http.post("/api/v1/runs", files={"file": ("floods.tgz", body)}, data={"project": "bench-floods"})
            posted.raise_for_status()
            run = wait_run(http, posted.json()["id"], 900.0, poll=0.25)
        if run["status"] != "ready":
            raise SystemExit(f"the benchmark run did not ingest: {run['status']} {run.get('error')}")
        wait_idle(server.pid)  # the run's summary is computed after `ready`
        rows = [("none (baseline)", None), *floods(base, run["id"]).items()]
        for name, flood in rows:
            print(f"  flood: {name} ...", flush=True)
            results["rows"].append(measure_flood(base, run["id"], name, flood, clients, seconds))
        results["service_peak_rss_mb"] = vm_hwm_mb(server.pid)
    return results


def report(results: dict[str, Any]) -> dict[str, bool]:
    print(f"\nfloods of cheap requests (issue 30), service on loopback, SQLite, {results['seconds']:g} s each")
    print(f"  {'flood':<16} {'clients':>7} {'probe p50':>10} {'p99':>8} {'max':>8}  flood answers")
    for row in results["rows"]:
        print(
            f"  {row['flood']:<16} {row['clients']:>7} {row['probe_p50_s']:>9.3f}s {row['probe_p99_s']:>7.3f}s "
            f"{row['probe_max_s']:>7.3f}s  {row['answers']}"
        )
    print(f"  service peak RSS {results['service_peak_rss_mb']:.0f} MB")
    met = {}
    for row in results["rows"][1:]:
        no_5xx = all(not status.startswith("5") for status in row["answers"]) and row["probe_not_200"] == 0
        met[f"(l) probe p99 <= {PROBE_P99_TARGET_S:g} s, no 5xx, under the {row['flood']} flood"] = (
            no_5xx and row["probe_p99_s"] <= PROBE_P99_TARGET_S
        )
    met[f"(l) service peak RSS <= {RSS_TARGET_MB:g} MB under the floods"] = (
        results["service_peak_rss_mb"] <= RSS_TARGET_MB
    )
    return met


def measure(points: int = 600_000, scalars_mib: int = 16, seconds: float = 15.0, clients: int = 12) -> dict[str, Any]:
    """The issue 30 figures for bench.run (in a throwaway directory)."""
    with tempfile.TemporaryDirectory(prefix="fp8-floods-") as tmp:
        return run_floods(Path(tmp), points=points, scalars_mib=scalars_mib, seconds=seconds, clients=clients)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.floods", description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=600_000)
    parser.add_argument("--scalars-mib", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--clients", type=int, default=12)
    args = parser.parse_args(argv)
    results = measure(args.points, args.scalars_mib, args.seconds, args.clients)
    return write_results("floods", results, report(results))


if __name__ == "__main__":
    raise SystemExit(main())
