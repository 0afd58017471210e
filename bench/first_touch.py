"""First touch: the service's cold start next to its warm start, and optionally a fresh clone's `make run`.

Cold: an empty numba cache (NUMBA_CACHE_DIR in a fresh directory, as on a fresh install) and a fresh data
directory: `fp8-policy serve` started, seconds until /healthz first answers (`answered_s`: 503 "starting" while
the app loads, service/transport/starting.py) and until it answers 200 (`healthz_s`: the app serves), the BioNeMo
ESM-2 fixture uploaded, seconds until it is `ready`, then SIGTERM and seconds until the process has exited. The
server's CPU seconds at each point are reported too (`*_cpu_s`): on a shared machine wall time is mostly waiting. The kernels are then compiled into
that cache by `python -m fp8_policy.service.ingest.kernel_warmup` (timed), and the same is measured again with the
warm cache, RESTARTS times: the restart (the median start reported, every start's /healthz 200 listed). Targets: /healthz within 3 s of a fresh start and 1 s of a restart (both for the first
answer and for 200), the fixture ready within 3 s of its upload, stopped within 5 s of SIGTERM.

`--make-run` also clones the repository into a temporary directory (without its venv), runs `make run PORT=...`
there and reports the seconds until the dashboard answers, until the install had finished (the Makefile's stamp
file appears), the CPU seconds of make and everything it ran, the venv's size (targets: 180 s, 900 MB), and how
full uv's and pip's download caches were before (a warm cache skips the downloads); it installs the server extra
from the package index, so it takes a minute or more.

    python -m bench.first_touch [--make-run | --make-run-only]   # JSON on stdout; `make bench` runs the cold/warm part
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import httpx

from bench.service import SERVE, cpu_seconds, free_port

ROOT = Path(__file__).resolve().parents[1]
ESM2 = ROOT.parent / "shared" / "fixtures" / "bionemo" / "dummy_logs_esm2"
TARGETS = {
    "answer_fresh_s": 3.0,  # /healthz answers at all (503 "starting" counts)
    "answer_restart_s": 1.0,
    "healthz_fresh_s": 3.0,  # /healthz answers 200: the app serves
    "healthz_restart_s": 1.0,
    "esm2_ready_s": 3.0,
    "stop_s": 5.0,
}
MAKE_RUN_TARGETS = {"make_run_s": 180.0, "venv_mb": 900.0}
RESTARTS = 5


def esm2_archive() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(ESM2, arcname=ESM2.name)
    return buffer.getvalue()


def _wait_for(url: str, process: subprocess.Popen, timeout: float, since: float | None = None) -> dict:
    """Poll GET url until it answers 200: {"answered_s": first answer of any status, "ok_s": the 200}, seconds
    from `since` (default: now), with the server's CPU seconds at each (`*_cpu_s`, NaN where unreadable).

    One client for all polls, every 20 ms: `httpx.get` builds a client and an SSL context per call, 45 ms of CPU
    on the 2-core dev VM (0.2 ms for a request of a kept client), so the polls came every 65 ms instead, the 200
    was seen up to 65 ms late, and the poller used 0.64 s of CPU per start beside the starting service (0.09 s
    now; restarts, median of 10 alternating: 1.06 s before, 1.04 s after)."""
    start = time.perf_counter() if since is None else since
    times: dict = {}
    with httpx.Client(timeout=2) as client:
        while time.perf_counter() - start < timeout:
            if process.poll() is not None:
                raise SystemExit(f"{process.args} exited with status {process.returncode} before {url} answered")
            try:
                status = client.get(url).status_code
            except httpx.TransportError:
                status = None
            if status is not None:
                for key in ("answered_s", "ok_s") if status == 200 else ("answered_s",):
                    if key not in times:
                        times[key] = time.perf_counter() - start
                        times[key.replace("_s", "_cpu_s")] = _cpu(process.pid)
                if status == 200:
                    return times
            time.sleep(0.02)
    raise SystemExit(f"{url} did not answer 200 within {timeout:g} s")


def _cpu(pid: int) -> float:
    try:
        return cpu_seconds(pid)
    except OSError:
        return float("nan")


def _stop(process: subprocess.Popen, timeout: float = 30.0) -> float:
    start = time.perf_counter()
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return float("inf")
    return time.perf_counter() - start


def start_and_upload(data_dir: Path, env: dict[str, str], archive: bytes, project: str) -> dict:
    """One start of `fp8-policy serve`: /healthz seconds, ESM-2 upload-to-ready seconds, SIGTERM-to-exit seconds."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    started = time.perf_counter()
    server = subprocess.Popen(
        [*SERVE, "--host", "127.0.0.1", "--port", str(port), "--no-demo", "--log-level", "warning"],
        cwd=ROOT,
        env={**env, "FP8_POLICY_DATA_DIR": str(data_dir)},
    )
    try:
        healthz = _wait_for(f"{url}/healthz", server, 120, since=started)
        with httpx.Client(base_url=url, timeout=300) as client:
            start = time.perf_counter()
            answer = client.post(
                "/api/v1/runs", files={"file": ("esm2.tar.gz", archive, "application/gzip")}, data={"project": project}
            )
            answer.raise_for_status()
            run_id = answer.json()["id"]
            while (run := client.get(f"/api/v1/runs/{run_id}").json())["status"] not in ("ready", "failed"):
                time.sleep(0.02)
            ready = time.perf_counter() - start
        if run["status"] != "ready":
            raise SystemExit(f"the ESM-2 fixture failed: {run['error']}")
        since_start = time.perf_counter() - started
        cpu = _cpu(server.pid)
    finally:
        stop = _stop(server)
    return {
        "answered_s": healthz["answered_s"],
        "answered_cpu_s": healthz["answered_cpu_s"],
        "healthz_s": healthz["ok_s"],
        "healthz_cpu_s": healthz["ok_cpu_s"],
        "esm2_ready_s": ready,
        "stop_s": stop,
        "start_to_ready_s": since_start,
        "cpu_at_ready_s": cpu,
    }


def measure_cold_and_warm() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "FP8_POLICY_DATABASE_URL"}
    archive = esm2_archive()
    with tempfile.TemporaryDirectory(prefix="fp8-first-touch-") as tmp:
        env["NUMBA_CACHE_DIR"] = str(Path(tmp) / "numba")  # empty: a fresh install's cache
        cold = start_and_upload(Path(tmp) / "cold", env, archive, "cold")
        print(f"cold start: {json.dumps(cold)}", file=sys.stderr, flush=True)
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "fp8_policy.service.ingest.kernel_warmup"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
        )
        compile_s = time.perf_counter() - start
        print(f"kernels compiled in {compile_s:.1f} s", file=sys.stderr, flush=True)
        # restarts: same data dir, warm cache. One start varies by +-0.3 s on the 2-core VM (alternating identical
        # starts measured 0.84-1.29 s), so the restart is judged on the median of RESTARTS starts, the slowest shown
        restarts = [start_and_upload(Path(tmp) / "cold", env, archive, f"warm-{k}") for k in range(RESTARTS)]
    warm = median_start(restarts)
    return {
        "cold": cold,
        "warm": warm,
        "restarts_healthz_s": [r["healthz_s"] for r in restarts],
        "restarts_healthz_cpu_s": [r["healthz_cpu_s"] for r in restarts],
        "compile_kernels_s": compile_s,
        "load_average": os.getloadavg(),
        "targets": TARGETS,
        "met": {
            "answer_fresh_s": cold["answered_s"] <= TARGETS["answer_fresh_s"],
            "answer_restart_s": warm["answered_s"] <= TARGETS["answer_restart_s"],
            "healthz_fresh_s": cold["healthz_s"] <= TARGETS["healthz_fresh_s"],
            "healthz_restart_s": warm["healthz_s"] <= TARGETS["healthz_restart_s"],
            "esm2_ready_s": max(cold["esm2_ready_s"], warm["esm2_ready_s"]) <= TARGETS["esm2_ready_s"],
            "stop_s": max(cold["stop_s"], warm["stop_s"]) <= TARGETS["stop_s"],
        },
    }


def median_start(starts: list[dict]) -> dict:
    """The start whose /healthz 200 came at the median time (the upper one of an even count)."""
    ordered = sorted(starts, key=lambda start: start["healthz_s"])
    return ordered[len(ordered) // 2]


def _cache_mb(path: Path) -> float:
    if not path.is_dir():
        return 0.0
    done = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True)
    return int(done.stdout.split()[0]) / 1024 if done.returncode == 0 else float("nan")


def measure_make_run() -> dict:
    """A fresh clone of this repository's HEAD: `make run` until the dashboard answers; the venv's size."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    caches_mb = {"uv": _cache_mb(Path(os.environ.get("UV_CACHE_DIR", cache / "uv"))), "pip": _cache_mb(cache / "pip")}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="fp8-make-run-") as tmp:
        clone = Path(tmp) / "fp8-policy"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "FP8_POLICY_"))}
        stamp = clone / ".venv" / ".installed-server"
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        make = subprocess.Popen(  # its own process group, as a terminal's job: SIGTERM reaches make and the server
            ["make", "run", f"PORT={port}"], cwd=clone, env=env, stdout=subprocess.DEVNULL, start_new_session=True
        )
        try:
            while not stamp.exists() and make.poll() is None and time.perf_counter() - start < 900:
                time.sleep(0.1)
            installed = time.perf_counter() - start
            answered = _wait_for(f"http://127.0.0.1:{port}/", make, 900, since=start)
            total = time.perf_counter() - start
        finally:
            os.killpg(make.pid, signal.SIGTERM)
            try:
                make.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(make.pid, signal.SIGKILL)
                make.wait()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        venv_kb = int(
            subprocess.run(["du", "-sk", str(clone / ".venv")], capture_output=True, text=True).stdout.split()[0]
        )
    return {
        "make_run_s": total,
        "installed_after_s": installed,
        "dashboard_answered_after_s": answered["answered_s"],  # 503 "starting" page, then the dashboard
        "cpu_s": (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime),
        "caches_mb_before": caches_mb,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "venv_mb": venv_kb / 1024,
        "targets": MAKE_RUN_TARGETS,
        "met": {"make_run_s": total <= MAKE_RUN_TARGETS["make_run_s"], "venv_mb": venv_kb / 1024 <= 900},
    }


def print_table(result: dict) -> None:
    if "cold" not in result:
        return
    cold, warm = result["cold"], result["warm"]
    print(f"{'first touch':<28}{'cold (empty cache)':>20}{'warm (restart)':>18}{'target':>10}")
    for key, label, target in (
        ("answered_s", "/healthz answers (s)", "3 / 1"),
        ("answered_cpu_s", "  server CPU by then (s)", ""),
        ("healthz_s", "/healthz 200 (s)", "3 / 1"),
        ("healthz_cpu_s", "  server CPU by then (s)", ""),
        ("esm2_ready_s", "ESM-2 upload -> ready (s)", "3"),
        ("stop_s", "SIGTERM -> exited (s)", "5"),
    ):
        print(f"{label:<28}{cold[key]:>20.2f}{warm[key]:>18.2f}{target:>10}")
    print(f"{'compiling the kernels (s)':<28}{result['compile_kernels_s']:>20.1f}{'(cached)':>18}{'':>10}")
    times = ", ".join(f"{s:.2f}" for s in result["restarts_healthz_s"])
    cpus = ", ".join(f"{s:.2f}" for s in result["restarts_healthz_cpu_s"])
    print(f"restart column: the median of {len(result['restarts_healthz_s'])} restarts; /healthz 200 after {times} s")
    print(f"  (server CPU by then {cpus} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--make-run", action="store_true", help="also time `make run` in a fresh clone")
    parser.add_argument("--make-run-only", action="store_true", help="only time `make run` in a fresh clone")
    args = parser.parse_args()
    result = {} if args.make_run_only else measure_cold_and_warm()
    if args.make_run or args.make_run_only:
        result["make_run"] = measure_make_run()
    print_table(result)
    if "make_run" in result:
        run = result["make_run"]
        print(
            f"make run: dashboard after {run['make_run_s']:.1f} s (installed after {run['installed_after_s']:.1f} s, "
            f"{run['cpu_s']:.1f} s CPU), venv {run['venv_mb']:.0f} MB; caches before: {run['caches_mb_before']} MB"
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
