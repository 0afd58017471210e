"""Mixed-load figure of `make bench` (issue 9): readers and uploads at once against `fp8-policy serve` on SQLite.

`--readers` clients (30) loop over the runs list, a run's analysis and its recommendation while `--uploads`
clients (8) each send one distinct archive, staggered over the first half of the window; everything runs for
`--seconds` (60) on loopback. Reported per endpoint: requests, p50 and p99 latency, the 5xx count (must be 0)
and other non-2xx answers; per upload: seconds until answered and until `ready`, and whether the stored line
and point counts equal what the generator wrote. The service's peak RSS comes from /proc (VmHWM).

    python -m bench.load --seconds 15        # a short run while developing
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import subprocess
import tarfile
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np

from bench.service import running_service, vm_hwm_mb, wait_run
from fp8_policy.policy.synthetic import SCENARIOS, SyntheticRun, write_run

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
READER_TARGETS = 3  # ready runs the readers read, uploaded before the window opens


@dataclasses.dataclass(frozen=True)
class Upload:
    name: str
    archive: bytes
    lines: int  # statistics lines written
    points: int  # distinct (rank, metric, iteration) values


LINES_PER_RANK = 150_000


def synthetic_upload(tmp: Path, k: int) -> Upload:
    """A two-rank run of one of the planted scenarios, ~150k statistics lines per rank (a few MB as tar.gz); `k`
    picks the scenario and the seed, so every archive has different bytes."""
    cases = sorted(SCENARIOS)
    base: SyntheticRun = SCENARIOS[cases[k % len(cases)]].run
    per_iteration = len(base.metric_cycle())
    steps = max(1, LINES_PER_RANK // per_iteration)
    run = dataclasses.replace(base, ranks=2, iterations=(steps - 1) * base.freq, seed=1000 + k)
    written = write_run(run, tmp / f"run{k}")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        for path in sorted(written.root.rglob("*.log")):
            tar.add(path, arcname=str(path.relative_to(written.root)))
    lines = sum(f.stats_lines for f in written.files)
    return Upload(f"load-{k}-{cases[k % len(cases)]}", buffer.getvalue(), lines, lines)


def _post(client: httpx.Client, upload: Upload, project: str) -> httpx.Response:
    return client.post(
        "/api/v1/runs",
        files={"file": (f"{upload.name}.tgz", upload.archive, "application/gzip")},
        data={"name": upload.name, "project": project},
    )


class Recorder:
    """Latencies and statuses per endpoint, from many threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.status: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        self.transport_errors: dict[str, int] = defaultdict(int)

    def call(self, endpoint: str, send) -> httpx.Response | None:
        start = time.perf_counter()
        try:
            response = send()
        except httpx.TransportError:
            with self.lock:
                self.transport_errors[endpoint] += 1
            return None
        with self.lock:
            self.latency[endpoint].append(time.perf_counter() - start)
            self.status[endpoint][response.status_code] += 1
        return response

    def summary(self) -> dict[str, dict]:
        out = {}
        for endpoint, values in sorted(self.latency.items()):
            arr = np.array(values)
            statuses = dict(self.status[endpoint])
            out[endpoint] = {
                "requests": len(values),
                "p50_ms": float(np.percentile(arr, 50) * 1000),
                "p99_ms": float(np.percentile(arr, 99) * 1000),
                "max_ms": float(arr.max() * 1000),
                "5xx": sum(n for s, n in statuses.items() if s >= 500),
                "other_non_2xx": sum(n for s, n in statuses.items() if s < 200 or 300 <= s < 500),
                "transport_errors": self.transport_errors[endpoint],
                "statuses": statuses,
            }
        return out


def run_load(seconds: float = 60.0, readers: int = 30, uploads: int = 8, server_cmd: list[str] | None = None) -> dict:
    """Start the service on a fresh SQLite data dir, seed the readers' runs, then run the mixed load."""
    with tempfile.TemporaryDirectory(prefix="fp8-load-") as tmp_name:
        tmp = Path(tmp_name)
        print(f"generating {READER_TARGETS + uploads} synthetic runs ...", flush=True)
        archives = [synthetic_upload(tmp / "logs", k) for k in range(READER_TARGETS + uploads)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("FP8_POLICY_")}
        with running_service(tmp / "service", command=server_cmd, env=env) as (server, url):
            return _measure(url, server, archives[:READER_TARGETS], archives[READER_TARGETS:], seconds, readers)


def _measure(
    url: str, server: subprocess.Popen, seeds: list[Upload], loads: list[Upload], seconds: float, readers: int
) -> dict:
    project = f"load-{time.time_ns()}"
    with httpx.Client(base_url=url, timeout=300) as client:
        seeded = [_post(client, upload, f"{project}-seed").json()["id"] for upload in seeds]
        targets = [wait_run(client, run_id, 300)["id"] for run_id in seeded]
    idle_rss = vm_hwm_mb(server.pid)
    paths = {
        "list": lambda k: "/api/v1/runs?limit=50",
        "analysis": lambda k: f"/api/v1/runs/{targets[k % len(targets)]}/analysis",
        "recommendation": lambda k: f"/api/v1/runs/{targets[k % len(targets)]}/recommendation",
    }
    order = list(paths)
    recorder = Recorder()
    stop = threading.Event()
    answered: dict[str, tuple[float, int, int | None]] = {}  # name -> (seconds, status, run id)

    def reader(k: int) -> None:
        with httpx.Client(base_url=url, timeout=120) as client:
            n = k
            while not stop.is_set():
                endpoint = order[n % len(order)]
                recorder.call(endpoint, lambda endpoint=endpoint, n=n: client.get(paths[endpoint](n)))
                n += 1

    def uploader(k: int, upload: Upload) -> None:
        time.sleep(k * (seconds / 2) / max(len(loads), 1))  # staggered over the first half of the window
        with httpx.Client(base_url=url, timeout=300) as client:
            start = time.perf_counter()
            response = recorder.call("upload", lambda: _post(client, upload, project))
            run_id = response.json().get("id") if response is not None and response.status_code < 300 else None
            answered[upload.name] = (
                time.perf_counter() - start,
                response.status_code if response is not None else 0,
                run_id,
            )

    print(f"mixed load: {readers} readers + {len(loads)} uploads for {seconds:g} s ...", flush=True)
    window = run_window(reader, readers, uploader, loads, seconds, stop)
    uploads = []
    with httpx.Client(base_url=url, timeout=120) as client:
        for upload in loads:
            seconds_answered, status, run_id = answered.get(upload.name, (float("nan"), 0, None))
            run = wait_run(client, run_id, 300) if run_id is not None else {}
            uploads.append({**upload_outcome(upload, status, run), "answered_s": seconds_answered})
    return {
        **window_result(window, readers, uploads, recorder),
        "uploads_exact": sum(u["exact"] for u in uploads),
        "service_peak_rss_mb": vm_hwm_mb(server.pid),
        "idle_rss_mb": idle_rss,
    }


def run_window(
    reader: Callable[[int], None],
    readers: int,
    uploader: Callable[[int, Upload], None],
    loads: list[Upload],
    seconds: float,
    stop: threading.Event,
) -> float:
    """`readers` reader threads and one uploader thread per upload, for `seconds`; then `stop` is set and every
    thread joined (at most 300 s each). Returns the window's length in seconds."""
    threads = [threading.Thread(target=reader, args=(k,), daemon=True) for k in range(readers)]
    threads += [threading.Thread(target=uploader, args=(k, u), daemon=True) for k, u in enumerate(loads)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(timeout=300)
    return time.monotonic() - began


def window_result(window: float, readers: int, uploads: list[dict], recorder: Recorder) -> dict:
    """What every mixed-load result starts with (here and bench/scale.py): the window's length, its readers and
    uploads, the per-endpoint summary and its 5xx and transport-error totals."""
    endpoints = recorder.summary()
    return {
        "seconds": window,
        "readers": readers,
        "uploads": uploads,
        "endpoints": endpoints,
        "server_5xx": sum(e["5xx"] for e in endpoints.values()),
        "transport_errors": sum(e["transport_errors"] for e in endpoints.values()),
    }


def upload_outcome(upload: Upload, http_status: int, run: dict) -> dict:
    """What became of one upload: its run's state and counts (`run` {} when it was refused), `exact` when it
    is ready with every line and point the generator wrote."""
    return {
        "name": upload.name,
        "http_status": http_status,
        "status": run.get("status"),
        "lines_read": run.get("lines_read"),
        "points": run.get("points"),
        "expected_lines": upload.lines,
        "exact": run.get("status") == "ready"
        and run.get("lines_read") == upload.lines
        and run.get("points") == upload.points,
        "ready_after_s": _ready_after(run),
    }


def print_endpoints(endpoints: dict[str, dict]) -> None:
    """The `Recorder.summary()` table: requests, p50/p99/max latency, 5xx, other non-2xx, transport errors."""
    print(
        f"  {'endpoint':<15}{'requests':>9}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'5xx':>6}{'other':>7}{'errors':>8}"
    )
    for name, e in endpoints.items():
        print(
            f"  {name:<15}{e['requests']:>9}{e['p50_ms']:>9.0f}{e['p99_ms']:>9.0f}{e['max_ms']:>9.0f}"
            f"{e['5xx']:>6}{e['other_non_2xx']:>7}{e['transport_errors']:>8}"
        )


def print_uploads(uploads: list[dict]) -> None:
    """One line per `upload_outcome` (with `answered_s`, the upload's own answer time, where measured)."""
    for u in uploads:
        ready = f"{u['ready_after_s']:.1f}" if u["ready_after_s"] is not None else "-"
        answered = f" in {u['answered_s']:5.2f} s" if "answered_s" in u else ""
        print(
            f"  upload {u['name']:<28} HTTP {u['http_status']}{answered}, {u['status']} "
            f"after {ready} s, lines {u['lines_read']}/{u['expected_lines']}, points {u['points']}"
            f"{'' if u['exact'] else '  <-- NOT EXACT'}"
        )


def _ready_after(run: dict) -> float | None:
    """Seconds from the run's creation to the end of its ingest (server clock)."""
    from datetime import datetime

    if not run.get("finished_at") or not run.get("created_at"):
        return None
    return (datetime.fromisoformat(run["finished_at"]) - datetime.fromisoformat(run["created_at"])).total_seconds()


def report(result: dict) -> None:
    print(
        f"\nmixed load: {result['readers']} readers + {len(result['uploads'])} uploads, "
        f"{result['seconds']:.0f} s on loopback (SQLite); service peak RSS {result['service_peak_rss_mb']:.0f} MB "
        f"(idle {result['idle_rss_mb']:.0f} MB)"
    )
    print_endpoints(result["endpoints"])
    print_uploads(result["uploads"])
    print(
        f"  5xx: {result['server_5xx']} (must be 0); transport errors: {result['transport_errors']}; "
        f"uploads ready with exact counts: {result['uploads_exact']}/{len(result['uploads'])}"
    )


P99_TARGET_MS = 2000.0  # issue 20: every endpoint's p99 under the mixed load, on SQLite and on PostgreSQL


def p99_met(endpoints: dict[str, dict]) -> bool:
    return all(e["p99_ms"] <= P99_TARGET_MS for e in endpoints.values())


def targets_met(result: dict) -> dict[str, bool]:
    return {
        "mixed load: no 5xx": result["server_5xx"] == 0 and result["transport_errors"] == 0,
        f"mixed load: every endpoint p99 <= {P99_TARGET_MS / 1000:g} s": p99_met(result["endpoints"]),
        "mixed load: every upload ready with exact counts": result["uploads_exact"] == len(result["uploads"]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--readers", type=int, default=30)
    parser.add_argument("--uploads", type=int, default=8)
    args = parser.parse_args(argv)
    result = run_load(args.seconds, args.readers, args.uploads)
    report(result)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "load.json").write_text(json.dumps(result, indent=2))
    return 0 if all(targets_met(result).values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
