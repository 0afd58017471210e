"""Issue 13 §7 figures: live runs against the real service (`fp8-policy serve`) on loopback.

Usage: python -m bench.live [--target 6m|small] [--interval 2] [--trials 3] [--max-seconds 600]

1. Append throughput: a writer thread appends the benchmark statistics log (bench/generate.py: 5.9 M lines for
   `6m`) to a file in 4 MiB writes while `LiveUploader` tails the directory and streams it to a live run every
   `--interval` seconds; figures: lines and MB per second from the first write to the last byte acknowledged.
2. Detector latency per increment: the loopback round trip of every PUT (append + parse of the new whole lines +
   detectors + event rows, all server-side), for the bulk pieces (8 MiB) and, once caught up, for realistic
   increments (one iteration of every series, ~200 KB) written every second.
3. Alert latency: a loopback webhook receiver and an alert rule (band crossings, severe); in `--trials`
   increments one healthy layer's gradient underflows% is planted at 60 %; the figure is the time from the
   writer's flush of that line to the webhook call arriving. Target: < 5 s with a 2 s interval.
4. Service CPU of the bulk phase (utime + stime of the service process from /proc/<pid>/stat): lines acknowledged
   per CPU second spent by the service (receiving, storing, parsing, detectors, events). Target: >= 1 M lines/s.

Bounded: the bulk phase stops at `--max-seconds` (figures then cover what was acknowledged) and the service and
uploader are stopped at the end; the run is not finalized (finalize = the normal ingest, measured by bench.run).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from bench.live_hook import Receiver, planted_arrivals
from bench.service import cpu_seconds, machine_busy_seconds, start_service, stop_service, vm_hwm_mb, wait_idle
from bench.trees import OUT, ensure_log_tree, write_results
from fp8_policy.client.client import PolicyClient
from fp8_policy.client.live import LiveUploader

STATS_REL = Path("rank_0/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log")
META_REL = Path("rank_0/nvdlfw_inspect_logs/nvdlfw_inspect_globalrank-0.log")
WRITE_BYTES = 4 * 1024**2
INCREMENT_SECONDS = 1.0  # the writer's cadence once caught up (one logged iteration per second)
PLANT_EVERY = 6  # increments between planted crossings
ALERT_TARGET_SECONDS = 5.0
CPU_LINES_TARGET = 1_000_000  # lines per second of service CPU
PREFIX_BYTES = 4 * 1024**2  # history the increments' live run starts with (one piece)
WARM_UP_BYTES = 5 * 1024**2  # a piece the interpreted parser does not take (kernels.SMALL_UPLOAD_BYTES is 4 MiB)
DEFAULT_MAX_SECONDS = 180.0  # the bulk phase's bound on a shared machine (figures then cover what was acknowledged)
LINE = re.compile(rb"^(?P<head>.* - INFO - (?P<name>\S+)\s+iteration=)(?P<it>\d+)(?P<mid>\s+value=)(?P<value>\S+)\s*$")


class _TimedClient(PolicyClient):
    """PolicyClient that times every append (PUT) round trip: (bytes, seconds, events, phase)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timings: list[tuple[int, float, int, str]] = []
        self.phase = "bulk"

    def append_live(self, run_id: int, path: str, offset: int, data: bytes) -> dict[str, Any]:
        start = time.perf_counter()
        answer = super().append_live(run_id, path, offset, data)
        self.timings.append((len(data), time.perf_counter() - start, len(answer.get("events", [])), self.phase))
        return answer


def _last_iteration_block(log: Path) -> tuple[list[re.Match[bytes]], int]:
    """The lines of the log's last iteration (every series once): the template of the increments."""
    with open(log, "rb") as handle:
        handle.seek(max(0, log.stat().st_size - 2 * 1024**2))
        tail = handle.read().splitlines()[1:]
    matches = [m for m in (LINE.match(line) for line in tail) if m]
    last = max(int(m["it"]) for m in matches)
    return [m for m in matches if int(m["it"]) == last], last


def _healthy_layers(block: list[re.Match[bytes]], count: int) -> list[str]:
    """Gradient underflows% series of the middle blocks whose last value is below 0.1 % (nowhere near a band)."""
    names = [
        m["name"].decode()
        for m in block
        if m["name"].endswith(b"_gradient_underflows%") and float(m["value"]) < 0.1 and b"layers." in m["name"]
    ]
    middle = names[len(names) // 4 : 3 * len(names) // 4] or names
    step = max(1, len(middle) // max(1, count))
    return middle[::step][:count]


def _increment(block: list[re.Match[bytes]], iteration: int, width: int, planted: str | None) -> bytes:
    out = []
    for m in block:
        value = b"60.0000" if planted is not None and m["name"].decode() == planted else m["value"]
        out.append(m["head"] + str(iteration).zfill(width).encode() + m["mid"] + value + b"\n")
    return b"".join(out)


def _stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"count": 0, "p50": None, "p95": None, "max": None}
    ordered = sorted(values)
    return {
        "count": len(values),
        "p50": statistics.median(ordered),
        "p95": ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))],
        "max": ordered[-1],
    }


def run_live_bench(
    tree: Path, workdir: Path, *, interval: float = 2.0, trials: int = 3, max_seconds: float = DEFAULT_MAX_SECONDS
) -> dict[str, Any]:
    """Both figures on one service: the bulk stream (live run 1), then increments with planted crossings on a
    second live run that starts caught up (so a bulk backlog cut at `max_seconds` cannot delay them)."""
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    receiver.calls = []  # type: ignore[attr-defined]
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    # the receiver listens on 127.0.0.1: a loopback webhook needs FP8_POLICY_WEBHOOK_ALLOW_PRIVATE=1
    env = {k: v for k, v in os.environ.items() if k != "FP8_POLICY_DATABASE_URL"}
    server, base = start_service(workdir / "service", env={**env, "FP8_POLICY_WEBHOOK_ALLOW_PRIVATE": "1"})
    project = f"bench-live-{time.time_ns()}"
    results: dict[str, Any] = {"interval_s": interval}
    try:
        with httpx.Client(base_url=base, timeout=30) as http:
            rule = http.post(
                "/api/v1/alerts/rules",
                json={
                    "project": project,
                    "webhook": f"http://127.0.0.1:{receiver.server_address[1]}/hook",
                    "format": "json",
                    "events": ["band_crossing"],
                    "min_severity": "severe",
                    "cooldown_seconds": 0,
                },
            )
            rule.raise_for_status()
        # the bulk run's project has no alert rule: its thousands of early warnings (band crossings of noisy series
        # re-fire per episode) would share the sender with the planted ones (round-robin per rule and run) and blur the figure
        results["service_start_wait_s"] = _until_started(tree, base, server.pid, f"{project}-warm-up")
        cpu_before, split_before = cpu_seconds(server.pid), _user_system(server.pid)
        machine_before, own_before = machine_busy_seconds(), time.process_time()
        results["bulk"] = _bulk(tree, workdir / "bulk", base, f"{project}-bulk", interval, max_seconds)
        results["bulk"]["service_cpu_s"] = cpu_seconds(server.pid) - cpu_before
        # the CPU the rest of the machine used meanwhile (another load inflates the service's CPU per line)
        results["bulk"]["bench_cpu_s"] = time.process_time() - own_before
        results["bulk"]["others_cpu_s"] = (
            machine_busy_seconds() - machine_before - results["bulk"]["service_cpu_s"] - results["bulk"]["bench_cpu_s"]
        )
        user, system = (after - before for after, before in zip(_user_system(server.pid), split_before, strict=True))
        results["bulk"]["service_user_s"], results["bulk"]["service_system_s"] = user, system
        results["bulk"]["lines_per_cpu_s"] = results["bulk"]["lines"] / max(results["bulk"]["service_cpu_s"], 1e-9)
        results.update(_increments(tree, workdir / "steady", base, project, interval, trials, receiver))
        results["service_peak_rss_mb"] = vm_hwm_mb(server.pid)
    finally:
        stop_service(server)
        receiver.shutdown()
    return results


def _until_started(tree: Path, base: str, pid: int, project: str) -> float:
    """Wait out the start-up work the service does after /healthz answers, as bench.run does before its uploads:
    loading the compiled kernels in the background (compiled first in a child process when their cache is stale),
    imports, the parser's buffers: seconds of CPU that are no line's. A piece of a throwaway live run larger than
    the interpreted parser takes waits for the compiled kernels; then the service is left to go quiet."""
    started = time.perf_counter()
    with open(tree / STATS_REL, "rb") as src:
        piece = src.read(WARM_UP_BYTES)
    with PolicyClient(base, timeout=600) as client:
        run = client.create_live_run(name="bench-live-warm-up", project=project)
        client.append_live(int(run["id"]), str(STATS_REL), 0, piece)
    wait_idle(pid)
    return time.perf_counter() - started


def _user_system(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of process `pid` (/proc/<pid>/stat fields 14, 15): the system share is the
    kernel's copying, page allocation and reclaim, which the machine's memory pressure moves from run to run."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / os.sysconf("SC_CLK_TCK"), int(fields[12]) / os.sysconf("SC_CLK_TCK")


def _watched_dir(tree: Path, watched: Path) -> Path:
    (watched / STATS_REL).parent.mkdir(parents=True)
    (watched / META_REL).parent.mkdir(parents=True)
    (watched / META_REL).write_bytes((tree / META_REL).read_bytes())
    return watched / STATS_REL


def _stop(uploader: LiveUploader) -> None:
    """Stop tailing without sending the rest (`finish` would send the whole backlog first)."""
    uploader._stop.set()  # the uploader's own stop flag; its thread ends after the piece in flight
    if uploader._thread is not None:
        uploader._thread.join(timeout=120)


def _bulk(tree: Path, watched: Path, base: str, project: str, interval: float, max_seconds: float) -> dict[str, Any]:
    """Live run 1: the whole log appended by 4 MiB writes while LiveUploader streams it."""
    source = tree / STATS_REL
    target = _watched_dir(tree, watched)
    client = _TimedClient(base, timeout=120)
    uploader = LiveUploader(watched, name="bench-live-bulk", project=project, interval=interval, client=client)
    total = source.stat().st_size
    written: dict[str, float | None] = {"done_at": None}

    def writer() -> None:
        with open(source, "rb") as src, open(target, "ab") as dst:
            while chunk := src.read(WRITE_BYTES):
                dst.write(chunk)
                dst.flush()
        written["done_at"] = time.perf_counter()

    start = time.perf_counter()
    threading.Thread(target=writer, daemon=True).start()
    uploader.start()
    deadline = start + max_seconds
    while time.perf_counter() < deadline:
        if written["done_at"] is not None and _acked(uploader, str(STATS_REL)) >= total:
            break
        time.sleep(0.05)
    end = time.perf_counter()
    acked = _acked(uploader, str(STATS_REL))
    _stop(uploader)
    client.close()
    lines = _count_lines(source, acked)
    pieces = list(client.timings)
    return {
        "bytes": acked,
        "lines": lines,
        "source_lines": _count_lines(source, total),
        "complete": acked >= total,
        "seconds": end - start,
        "writer_seconds": (written["done_at"] or end) - start,
        "mb_per_s": acked / 1e6 / (end - start),
        "lines_per_s": lines / (end - start),
        "pieces": len(pieces),
        "piece_mb": _stats([b / 1e6 for b, *_ in pieces])["p50"],
        "put_seconds": _stats([s for _, s, *_ in pieces]),
        "put_seconds_per_mb": _stats([s / (b / 1e6) for b, s, *_ in pieces if b]),
        "events": sum(e for *_, e, _p in pieces),
        "upload_failures": uploader.stats.failures,
    }


def _increments(
    tree: Path, watched: Path, base: str, project: str, interval: float, trials: int, receiver: ThreadingHTTPServer
) -> dict[str, Any]:
    """Live run 2: the log's first PREFIX_BYTES (history for the detectors), then one iteration per second, some
    with a planted crossing; the time from each planted line's flush to its webhook call."""
    source = tree / STATS_REL
    target = _watched_dir(tree, watched)
    block, last_it = _last_iteration_block(source)
    width = len(block[0]["it"])  # zero-padded as logged
    plants = _healthy_layers(block, trials)
    with open(source, "rb") as src:
        prefix = src.read(PREFIX_BYTES)
    target.write_bytes(prefix[: prefix.rfind(b"\n") + 1])
    client = _TimedClient(base, timeout=120)
    uploader = LiveUploader(watched, name="bench-live-increments", project=project, interval=interval, client=client)
    uploader.start()
    deadline = time.perf_counter() + 120
    while _acked(uploader, str(STATS_REL)) < target.stat().st_size and time.perf_counter() < deadline:
        time.sleep(0.05)
    client.phase = "steady"
    planted_at: dict[str, tuple[int, float]] = {}
    iteration = last_it
    increments = trials * PLANT_EVERY + 2
    with open(target, "ab") as dst:
        for k in range(increments):
            iteration += 2
            layer = plants[k // PLANT_EVERY] if k % PLANT_EVERY == 2 and k // PLANT_EVERY < len(plants) else None
            dst.write(_increment(block, iteration, width, layer))
            dst.flush()
            if layer is not None:
                planted_at[layer] = (iteration, time.perf_counter())
            time.sleep(INCREMENT_SECONDS)
    wait_until = time.perf_counter() + 3 * ALERT_TARGET_SECONDS
    while time.perf_counter() < wait_until and len(planted_arrivals(receiver, planted_at)) < len(planted_at):
        time.sleep(0.1)
    arrivals = planted_arrivals(receiver, planted_at)
    _stop(uploader)
    client.close()
    steady = [t for t in client.timings if t[3] == "steady"]
    latencies = [arrivals[layer] - at for layer, (_it, at) in planted_at.items() if layer in arrivals]
    return {
        "steady": {
            "increments": increments,
            "increment_kb": len(_increment(block, iteration, width, None)) / 1e3,
            "lines_per_increment": len(block),
            "pieces": len(steady),
            "piece_kb": _stats([b / 1e3 for b, *_ in steady])["p50"],
            "put_seconds": _stats([s for _, s, *_ in steady]),
        },
        "alerts": {
            "planted": len(planted_at),
            "received": len(latencies),
            "seconds": _stats(latencies),
            "all_calls": len(receiver.calls),  # type: ignore[attr-defined]
            "target_s": ALERT_TARGET_SECONDS,
        },
    }


def _acked(uploader: LiveUploader, remote: str) -> int:
    tracked = uploader._files.get(remote)  # the uploader's acknowledged offset of the file
    return tracked.acked if tracked is not None else 0


def _count_lines(path: Path, size: int) -> int:
    lines = 0
    with open(path, "rb") as handle:
        left = size
        while left > 0 and (chunk := handle.read(min(1 << 24, left))):
            lines += chunk.count(b"\n")
            left -= len(chunk)
    return lines


def report(results: dict[str, Any], baseline_seconds: float | None = None) -> dict[str, bool]:
    """Print the figures (with the baseline parser's lines/s of the same log when bench.run measured it);
    returns the targets (label -> met)."""
    bulk, steady, alerts = results["bulk"], results["steady"], results["alerts"]
    fmt = lambda v, d=3: "n/a" if v is None else f"{v:.{d}f}"  # noqa: E731
    print(f"\nlive runs (issue 13 §7), service on loopback, LiveUploader interval {results['interval_s']:g} s")
    print(
        f"  append throughput: {bulk['lines']:,} lines / {bulk['bytes'] / 1e6:,.0f} MB acknowledged in "
        f"{bulk['seconds']:.1f} s (writer done after {bulk['writer_seconds']:.1f} s): "
        f"{bulk['lines_per_s']:,.0f} lines/s, {bulk['mb_per_s']:.1f} MB/s"
        + ("" if bulk["complete"] else "  [stopped at --max-seconds]")
    )
    print(
        f"    service CPU: {bulk['service_cpu_s']:.1f} s (user {bulk['service_user_s']:.1f} s, system "
        f"{bulk['service_system_s']:.1f} s) for those lines: {bulk['lines_per_cpu_s']:,.0f} lines/s of "
        f"service CPU (target >= {CPU_LINES_TARGET:,}); meanwhile the bench's uploader and writer used "
        f"{bulk.get('bench_cpu_s', float('nan')):.1f} s and other processes {bulk.get('others_cpu_s', float('nan')):.1f} s"
    )
    if baseline_seconds:
        print(
            f"    baseline (bench/baseline.py parsing the whole file, same run): "
            f"{bulk['source_lines'] / baseline_seconds:,.0f} lines/s"
        )
    put = bulk["put_seconds"]
    print(
        f"  bulk PUT ({bulk['pieces']} pieces of ~{fmt(bulk['piece_mb'], 1)} MB, {bulk['events']} events): "
        f"p50 {fmt(put['p50'])} s, p95 {fmt(put['p95'])} s, max {fmt(put['max'])} s; "
        f"p50 {fmt(bulk['put_seconds_per_mb']['p50'])} s/MB"
    )
    put = steady["put_seconds"]
    print(
        f"  detector latency per increment ({steady['pieces']} PUTs of ~{fmt(steady['piece_kb'], 0)} KB; an "
        f"iteration is {steady['increment_kb']:.0f} KB = {steady['lines_per_increment']:,} lines, written every "
        f"{INCREMENT_SECONDS:g} s): p50 {fmt(put['p50'])} s, p95 {fmt(put['p95'])} s, "
        f"max {fmt(put['max'])} s"
    )
    sec = alerts["seconds"]
    print(
        f"  planted crossing -> webhook: {alerts['received']}/{alerts['planted']} received; p50 {fmt(sec['p50'], 2)} s, "
        f"max {fmt(sec['max'], 2)} s (target < {alerts['target_s']:g} s); {alerts['all_calls']} webhook calls in all"
    )
    met = alerts["received"] == alerts["planted"] > 0 and sec["max"] is not None and sec["max"] < alerts["target_s"]
    return {
        f"live: planted crossing to webhook < {alerts['target_s']:g} s (interval {results['interval_s']:g} s)": met,
        f"live: >= {CPU_LINES_TARGET:,} lines/s of service CPU": bulk["lines_per_cpu_s"] >= CPU_LINES_TARGET,
    }


def measure(tree: Path, max_seconds: float = DEFAULT_MAX_SECONDS) -> dict[str, Any]:
    """The live-run figures for bench.run (in a throwaway directory)."""
    with tempfile.TemporaryDirectory(prefix="fp8-live-bench-") as tmp:
        return run_live_bench(tree, Path(tmp), max_seconds=max_seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.live", description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=("6m", "small"), default="6m")
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--max-seconds", type=float, default=DEFAULT_MAX_SECONDS)
    args = parser.parse_args(argv)

    OUT.mkdir(parents=True, exist_ok=True)
    tree = ensure_log_tree(args.target)
    with tempfile.TemporaryDirectory(prefix="fp8-live-bench-") as tmp:
        results = run_live_bench(
            tree, Path(tmp), interval=args.interval, trials=args.trials, max_seconds=args.max_seconds
        )
    return write_results("live", results, report(results))


if __name__ == "__main__":
    raise SystemExit(main())
