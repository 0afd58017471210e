"""First touch: the service's cold start next to its warm start, and optionally a fresh clone's `make run`.

Cold: an empty numba cache (NUMBA_CACHE_DIR in a fresh directory, as on a fresh install) and a fresh data
directory: `fp8-policy serve` started, seconds until /healthz answers, the BioNeMo ESM-2 fixture uploaded, seconds
until it is `ready`, then SIGTERM and seconds until the process has exited. The kernels are then compiled into
that cache by `python -m fp8_policy.service.ingest.kernel_warmup` (timed), and the same is measured again with the
warm cache: the restart. Targets: /healthz within 3 s of a fresh start and 1 s of a restart, the fixture ready
within 3 s of its upload, stopped within 5 s of SIGTERM.

`--make-run` also clones the repository into a temporary directory (without its venv), runs `make run PORT=...`
there and reports the seconds until the dashboard answers and the venv's size (targets: 180 s, 900 MB); it
installs the server extra from the package index, so it takes minutes.

    python -m bench.first_touch [--make-run]     # JSON on stdout; `make bench` runs the cold/warm part
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import httpx

from bench.service import SERVE, free_port

ROOT = Path(__file__).resolve().parents[1]
ESM2 = ROOT.parent / "shared" / "fixtures" / "bionemo" / "dummy_logs_esm2"
TARGETS = {"healthz_fresh_s": 3.0, "healthz_restart_s": 1.0, "esm2_ready_s": 3.0, "stop_s": 5.0}
MAKE_RUN_TARGETS = {"make_run_s": 180.0, "venv_mb": 900.0}


def esm2_archive() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(ESM2, arcname=ESM2.name)
    return buffer.getvalue()


def _wait_for(url: str, process: subprocess.Popen, timeout: float) -> float:
    """Seconds until GET url answers 200 (measured from now)."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if process.poll() is not None:
            raise SystemExit(f"{process.args} exited with status {process.returncode} before {url} answered")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return time.perf_counter() - start
        except httpx.TransportError:
            pass
        time.sleep(0.02)
    raise SystemExit(f"{url} did not answer within {timeout:g} s")


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
        healthz = _wait_for(f"{url}/healthz", server, 120)
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
    finally:
        stop = _stop(server)
    return {"healthz_s": healthz, "esm2_ready_s": ready, "stop_s": stop, "start_to_ready_s": since_start}


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
        warm = start_and_upload(Path(tmp) / "cold", env, archive, "warm")  # a restart: same data dir, warm cache
    return {
        "cold": cold,
        "warm": warm,
        "compile_kernels_s": compile_s,
        "targets": TARGETS,
        "met": {
            "healthz_fresh_s": cold["healthz_s"] <= TARGETS["healthz_fresh_s"],
            "healthz_restart_s": warm["healthz_s"] <= TARGETS["healthz_restart_s"],
            "esm2_ready_s": max(cold["esm2_ready_s"], warm["esm2_ready_s"]) <= TARGETS["esm2_ready_s"],
            "stop_s": max(cold["stop_s"], warm["stop_s"]) <= TARGETS["stop_s"],
        },
    }


def measure_make_run() -> dict:
    """A fresh clone of this repository's HEAD: `make run` until the dashboard answers; the venv's size."""
    with tempfile.TemporaryDirectory(prefix="fp8-make-run-") as tmp:
        clone = Path(tmp) / "fp8-policy"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "FP8_POLICY_"))}
        start = time.perf_counter()
        make = subprocess.Popen(  # its own process group, as a terminal's job: SIGTERM reaches make and the server
            ["make", "run", f"PORT={port}"], cwd=clone, env=env, stdout=subprocess.DEVNULL, start_new_session=True
        )
        try:
            answered = _wait_for(f"http://127.0.0.1:{port}/", make, 900)
            total = time.perf_counter() - start
        finally:
            os.killpg(make.pid, signal.SIGTERM)
            try:
                make.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(make.pid, signal.SIGKILL)
                make.wait()
        venv_kb = int(
            subprocess.run(["du", "-sk", str(clone / ".venv")], capture_output=True, text=True).stdout.split()[0]
        )
    return {
        "make_run_s": total,
        "dashboard_after_s": answered,
        "venv_mb": venv_kb / 1024,
        "targets": MAKE_RUN_TARGETS,
        "met": {"make_run_s": total <= MAKE_RUN_TARGETS["make_run_s"], "venv_mb": venv_kb / 1024 <= 900},
    }


def print_table(result: dict) -> None:
    cold, warm = result["cold"], result["warm"]
    print(f"{'first touch':<28}{'cold (empty cache)':>20}{'warm (restart)':>18}{'target':>10}")
    for key, label, target in (
        ("healthz_s", "/healthz after start (s)", "3 / 1"),
        ("esm2_ready_s", "ESM-2 upload -> ready (s)", "3"),
        ("stop_s", "SIGTERM -> exited (s)", "5"),
    ):
        print(f"{label:<28}{cold[key]:>20.2f}{warm[key]:>18.2f}{target:>10}")
    print(f"{'compiling the kernels (s)':<28}{result['compile_kernels_s']:>20.1f}{'(cached)':>18}{'':>10}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--make-run", action="store_true", help="also time `make run` in a fresh clone")
    args = parser.parse_args()
    result = measure_cold_and_warm()
    if args.make_run:
        result["make_run"] = measure_make_run()
    print_table(result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
