"""Contract: the real `PolicyClient` and CLI against the real app served by uvicorn on a loopback port (no mocks).

Two synthetic runs (policy/synthetic/): `healthy` passes the gate, `head_only` fails it at `critical`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
import yaml
from click.testing import CliRunner

from fp8_policy.client import ApiError, IngestFailed, NotFound, PolicyClient
from fp8_policy.db.migrate import upgrade
from fp8_policy.policy.synthetic import SCENARIOS, write_run
from fp8_policy.service.app import create_app
from fp8_policy.service.cli import cli
from fp8_policy.service.settings import Settings
from tests.policy.recommend.test_recommend import KEYS

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "contract"


@dataclasses.dataclass
class Served:
    url: str
    routes: set[str]  # paths in the served OpenAPI document
    logs: dict[str, Path]


def _serve(app, sock: socket.socket) -> tuple[uvicorn.Server, threading.Thread]:
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    return server, thread


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The migrated app on 127.0.0.1:<free port>, plus the two log directories (with non-log files around)."""
    tmp = tmp_path_factory.mktemp("contract")
    url = f"sqlite:///{tmp / 'fp8_policy.db'}"
    upgrade(url)
    app = create_app(Settings(_env_file=None, data_dir=tmp / "data", database_url=url))
    logs = {}
    for scenario in ("healthy", "head_only"):
        write_run(dataclasses.replace(SCENARIOS[scenario].run, iterations=200), tmp / scenario)
        (tmp / scenario / "checkpoint.pt").write_bytes(b"\0" * 1024)  # packing must leave it out
        logs[scenario] = tmp / scenario
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server, thread = _serve(app, sock)
    try:
        base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        routes = set(httpx.get(f"{base_url}/openapi.json", timeout=10).json()["paths"])
        yield Served(base_url, routes, logs)
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


@pytest.fixture(scope="module")
def run_ids(served: Served) -> dict[str, int]:
    """Both directories uploaded with the client and waited for."""
    ids = {}
    with PolicyClient(served.url) as client:  # the service is open: no token in its database
        for scenario, path in served.logs.items():
            run = client.upload(
                path, name=scenario, project=PROJECT, tags=["contract", scenario], metadata={"gpu": "h100"}
            )
            assert run["status"] == "queued"
            ready = client.wait(run["id"], timeout=60)
            assert ready["status"] == "ready", ready
            ids[scenario] = run["id"]
    return ids


@pytest.fixture
def client(served: Served) -> Iterator[PolicyClient]:
    with PolicyClient(served.url) as policy_client:
        yield policy_client


def _cli(served: Served, *args: str):
    return CliRunner().invoke(cli, [*args, "--url", served.url])


def test_uploaded_directory_is_ingested_with_only_its_logs(client: PolicyClient, run_ids: dict[str, int]) -> None:
    run = client.run(run_ids["healthy"])

    assert (run["name"], run["project"], run["tags"], run["metadata"]) == (
        "healthy",
        PROJECT,
        ["contract", "healthy"],
        {"gpu": "h100"},
    )
    assert run["upload_filename"] == "healthy.tar.gz"
    assert run["layer_count"] > 0 and run["ranks"] == 1
    report = run["ingest_report"]
    assert [f["path"] for f in report["files"]] == [
        "rank_0/nvdlfw_inspect_logs/nvdlfw_inspect_globalrank-0.log",
        "rank_0/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log",
    ]
    assert report["archive"]["skipped_members"] == 0  # checkpoint.pt was never sent


def test_uploading_the_same_directory_again_returns_the_existing_run(client, served, run_ids) -> None:
    assert client.upload(served.logs["healthy"], project=PROJECT)["id"] == run_ids["healthy"]


def test_listing_layers_and_series(client: PolicyClient, run_ids: dict[str, int]) -> None:
    assert set(run_ids.values()) <= {r["id"] for r in client.iter_runs(project=PROJECT, status="ready")}
    layers = client.layers(run_ids["head_only"])
    stat = layers[0]["stats"][0]
    series = client.series(run_ids["head_only"], layers[0]["name"], stat["tensor"], stat["stat"])
    assert series["series"][0]["iterations"][:2] == [0, 10]


def test_analysis_finds_the_planted_patterns(client: PolicyClient, run_ids: dict[str, int]) -> None:
    healthy, head_only = client.analysis(run_ids["healthy"]), client.analysis(run_ids["head_only"])

    assert [f["pattern"] for f in healthy["findings"]] == ["healthy"]
    assert "head_only" in {f["pattern"] for f in head_only["findings"]}
    assert set(head_only) >= {"run_id", "findings", "layers", "thresholds", "stats", "notes"}


def test_recommendation_in_every_format(client: PolicyClient, run_ids: dict[str, int]) -> None:
    run_id = run_ids["head_only"]
    policy = client.recommendation(run_id)
    rendered = {fmt: client.recommendation(run_id, format=fmt) for fmt in ("te-yaml", "megatron", "hydra", "torchao")}

    assert set(policy) >= KEYS
    assert policy["fp8_skip_layers"]
    assert isinstance(yaml.safe_load(rendered["te-yaml"]), dict)
    compile(rendered["torchao"], "torchao_fp8_filter.py", "exec")
    assert all(isinstance(text, str) and text.strip() for text in rendered.values())
    recomputed = client.recommendation(run_id, overrides={"gpu_arch": "hopper"})
    assert recomputed["fp8_skip_layers"] == policy["fp8_skip_layers"]


def test_server_errors_come_back_typed(client: PolicyClient, run_ids: dict[str, int]) -> None:
    with pytest.raises(NotFound) as missing:
        client.run(987654)
    with pytest.raises(ApiError) as bad_format:
        client.recommendation(run_ids["healthy"], format="xlsx")

    assert (missing.value.status, missing.value.error, missing.value.detail) == (
        404,
        "NotFound",
        "run 987654 does not exist",
    )
    assert (bad_format.value.status, bad_format.value.error) == (400, "UnknownFormat")


def test_a_failed_ingest_raises_with_the_servers_error(client: PolicyClient, tmp_path: Path) -> None:
    bogus = tmp_path / "run.tar.gz"
    bogus.write_bytes(b"not an archive\n")

    with pytest.raises(IngestFailed) as caught:
        client.wait(client.upload(bogus, project=PROJECT)["id"], timeout=30)

    assert caught.value.server_error.startswith("NotAnArchive: ")
    assert caught.value.run["status"] == "failed"


def test_gate_exit_codes(served: Served, run_ids: dict[str, int], tmp_path: Path) -> None:
    healthy = _cli(served, "gate", str(run_ids["healthy"]))
    failing = _cli(
        served,
        "gate",
        str(run_ids["head_only"]),
        "--fail-on",
        "critical",
        "--summary-file",
        str(tmp_path / "summary.md"),
    )
    unknown = _cli(served, "gate", "987654")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        unreachable = CliRunner().invoke(cli, ["gate", "1", "--url", f"http://127.0.0.1:{sock.getsockname()[1]}"])

    assert (healthy.exit_code, failing.exit_code, unknown.exit_code, unreachable.exit_code) == (0, 1, 2, 2)
    assert healthy.stdout.startswith("## FP8 policy gate: PASS")
    assert failing.stdout.startswith("## FP8 policy gate: FAIL")
    assert "| severe | head_only |" in (tmp_path / "summary.md").read_text()
    assert unknown.stderr == "error: NotFound: run 987654 does not exist\n"
    assert unreachable.stderr.startswith("error: ConnectionFailed: cannot reach the fp8-policy service at http://127")


def test_cli_journey_upload_wait_recommend(served: Served, tmp_path: Path) -> None:
    """The CI journey: `upload --wait --json`, then `recommend --format te-yaml -o`, as in the workflow example."""
    uploaded = _cli(served, "upload", str(served.logs["head_only"]), "--project", "ci", "--wait", "--json")
    run_id = json.loads(uploaded.stdout)["id"]
    out = tmp_path / "fp8_policy.yaml"
    written = _cli(served, "recommend", str(run_id), "--format", "te-yaml", "-o", str(out))

    assert uploaded.exit_code == 0 and json.loads(uploaded.stdout)["status"] == "ready"
    assert written.stdout == f"wrote the te-yaml policy of run {run_id} to {out}\n"
    assert isinstance(yaml.safe_load(out.read_text()), dict)
    assert "status     ready" in _cli(served, "status", str(run_id)).stdout
    assert _cli(served, "analysis", str(run_id)).stdout.startswith("SEVERITY")


def test_console_script_process_exit_code(served: Served, run_ids: dict[str, int]) -> None:
    """The real process: exit code 1 for a failing gate, no traceback."""
    env = {**os.environ, "FP8_POLICY_URL": served.url}
    done = subprocess.run(
        [sys.executable, "-m", "fp8_policy.service.cli", "gate", str(run_ids["head_only"]), "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["passed"] is False


def test_compare(client: PolicyClient, served: Served, run_ids: dict[str, int]) -> None:
    if "/api/v1/compare" not in served.routes:
        pytest.skip("GET /api/v1/compare is not served yet (another helper is adding it)")
    result = client.compare(run_ids["healthy"], run_ids["head_only"])
    printed = _cli(served, "compare", str(run_ids["healthy"]), str(run_ids["head_only"]))

    assert "head_only" in {f["pattern"] for f in result["findings_appeared"]}
    assert (result["base"]["id"], result["head"]["id"]) == (run_ids["healthy"], run_ids["head_only"])
    assert printed.exit_code == 0
    assert printed.stdout.startswith(
        f"base  run {run_ids['healthy']} healthy\nhead  run {run_ids['head_only']} head_only\n"
    )
    assert "findings appeared:" in printed.stdout


def test_heatmap(client: PolicyClient, served: Served, run_ids: dict[str, int], tmp_path: Path) -> None:
    if "/api/v1/runs/{run_id}/heatmap.png" not in served.routes:
        pytest.skip("GET /api/v1/runs/{id}/heatmap.png is not served yet (another helper is adding it)")
    path = client.heatmap(run_ids["head_only"], tmp_path / "heat.png")
    printed = _cli(
        served, "heatmap", str(run_ids["head_only"]), "-o", str(tmp_path / "cli.png"), "--tensor", "activation"
    )
    with pytest.raises(ApiError) as bad:
        client.heatmap(run_ids["head_only"], tmp_path / "bad.png", dpi=10_000)

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert printed.exit_code == 0 and printed.stdout.startswith(f"wrote the heatmap of run {run_ids['head_only']} to ")
    assert (tmp_path / "cli.png").read_bytes()[:4] == b"\x89PNG"
    assert (bad.value.status, bad.value.error) == (400, "InvalidParameter")
    assert not (tmp_path / "bad.png").exists()
