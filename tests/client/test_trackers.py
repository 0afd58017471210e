"""`fp8-policy upload --mlflow-run-id` / `--wandb-run`: the verdict, gate result and rendered configs go into the
experiment tracker's run, and its link is stored with ours. MLflow against a real `mlflow server` on loopback (a
SQLite store under tmp_path); W&B in offline mode (WANDB_MODE=offline), checked in the offline run's files."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from fp8_policy.client import PolicyClient
from fp8_policy.client.cli import cli
from tests.client.cli.test_configs_cli import small_log
from tests.support.api_runs import live_server, sqlite_settings

mlflow = pytest.importorskip("mlflow", reason="the mlflow extra (make test installs it)")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("trackers")
    with live_server(sqlite_settings(root)) as url:
        yield url


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("mlflow")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        str(Path(sys.executable).with_name("mlflow")),
        "server",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--workers", "1",
        "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
        "--default-artifact-root", str(root / "artifacts"),
    ]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert server.poll() is None, "mlflow server exited"
            time.sleep(0.5)
        else:
            pytest.fail("mlflow server did not answer /health within 90 s")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


def log_file(tmp_path: Path, tag: str) -> Path:
    path = tmp_path / f"{tag}.log"
    path.write_bytes(small_log() + f"# {tag}\n".encode())
    return path


def test_upload_hands_the_answer_to_an_mlflow_run(service: str, mlflow_server: str, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    tracker = MlflowClient(tracking_uri=mlflow_server)
    experiment = tracker.create_experiment("fp8-training")
    training = tracker.create_run(experiment).info.run_id
    args = ["upload", str(log_file(tmp_path, "mlflow")), "--project", "trk", "--mlflow-run-id", training]

    result = CliRunner().invoke(cli, [*args, "--mlflow-tracking-uri", mlflow_server, "--url", service, "--json"])

    assert result.exit_code == 0, result.output
    ours = json.loads(result.stdout)
    link = ours["training_run"]
    assert link == {
        "kind": "mlflow",
        "ref": training,
        "url": f"{mlflow_server}/#/experiments/{experiment}/runs/{training}",
    }
    with PolicyClient(service) as client:
        assert client.run(ours["id"])["training_run"] == link  # stored with our run
        kept = {item["filename"]: item for item in client.configs(ours["id"])}
        gate = CliRunner().invoke(cli, ["gate", str(ours["id"]), "--url", service, "--json"])
        contents = {name: client.config_content(ours["id"], item["id"]) for name, item in kept.items()}
    tags = tracker.get_run(training).data.tags
    assert tags["fp8_policy.gate_passed"] == str(json.loads(gate.stdout)["passed"])
    assert tags["fp8_policy.run_url"] == f"{service}/#/runs/{ours['id']}"
    assert tags["fp8_policy.severity"] in ("ok", "warning", "critical", "severe")
    logged = {info.path for info in tracker.list_artifacts(training, "fp8_policy")}
    assert "fp8_policy/gate.json" in logged
    for name, item in kept.items():
        artifact = f"fp8_policy/v{item['version']}-{name}"
        assert artifact in logged
        local = tracker.download_artifacts(training, artifact, str(tmp_path))
        assert Path(local).read_bytes() == contents[name]  # the very bytes kept with our run
    assert {item["format"] for item in kept.values()} == {"json", "te-yaml", "megatron", "hydra", "torchao"}


def test_an_mlflow_run_that_does_not_exist_stores_no_link(service: str, mlflow_server: str, tmp_path: Path) -> None:
    args = ["upload", str(log_file(tmp_path, "missing")), "--project", "trk", "--mlflow-run-id", "0" * 32]

    result = CliRunner().invoke(cli, [*args, "--mlflow-tracking-uri", mlflow_server, "--url", service])

    assert result.exit_code == 2
    assert "TrackerError" in result.stderr and "0" * 32 in result.stderr
    with PolicyClient(service) as client:
        (run,) = [r for r in client.runs(project="trk")["items"] if r["name"] == "missing"]
        assert run["training_run"] is None


def test_upload_hands_the_answer_to_a_wandb_run_offline(
    service: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("wandb", reason="the wandb extra (make test installs it)")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    for variable in ("WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_ARTIFACT_DIR", "WANDB_CONFIG_DIR"):
        monkeypatch.setenv(variable, str(tmp_path / variable.lower()))  # nothing written outside tmp_path
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    args = ["upload", str(log_file(tmp_path, "wandb")), "--project", "trk", "--wandb-run", "team/fp8-study/abc123"]

    result = CliRunner().invoke(cli, [*args, "--url", service, "--json"])

    assert result.exit_code == 0, result.output
    ours = json.loads(result.stdout)
    assert ours["training_run"] == {
        "kind": "wandb",
        "ref": "team/fp8-study/abc123",
        "url": "https://wandb.ai/team/fp8-study/runs/abc123",
    }
    # offline, W&B writes the run as records of its transaction log (protobuf); the summary's keys and JSON values
    # and the artifact manifest's file names with their base64 MD5 digests are stored as they are
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*-abc123")
    records = _written(
        run_dir / "run-abc123.wandb", (b"fp8_policy.gate_passed", f"fp8-policy-run{ours['id']}".encode())
    )
    with PolicyClient(service) as client:
        gate = json.loads(CliRunner().invoke(cli, ["gate", str(ours["id"]), "--url", service, "--json"]).stdout)
        kept = client.configs(ours["id"])
        contents = {f"v{c['version']}-{c['filename']}": client.config_content(ours["id"], c["id"]) for c in kept}
    assert b"fp8_policy.run_url" in records and json.dumps(f"{service}/#/runs/{ours['id']}").encode() in records
    assert b"fp8_policy.gate_passed" in records and json.dumps(str(gate["passed"])).encode() in records
    assert b"fp8-policy-config" in records and f"fp8-policy-run{ours['id']}".encode() in records
    assert len(contents) == 5
    for name, data in contents.items():
        digest = base64.b64encode(hashlib.md5(data).digest())
        assert name.encode() + b"\x12\x18" + digest in records, name  # the manifest entry: path, then its digest


def _written(path: Path, needles: tuple[bytes, ...], timeout: float = 60.0) -> bytes:
    """The offline transaction log once W&B's writer has put every one of `needles` in it: `finish()`
    returns when the run is handed to the wandb service process, which writes the file on its own (it stays up for
    the test process, as it would not for the one-shot CLI)."""
    deadline = time.monotonic() + timeout
    while True:
        records = path.read_bytes()
        if all(needle in records for needle in needles) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def test_one_tracker_per_upload(service: str, tmp_path: Path) -> None:
    args = ["upload", str(log_file(tmp_path, "both")), "--mlflow-run-id", "x", "--wandb-run", "a/b/c", "--url", service]

    result = CliRunner().invoke(cli, args)

    assert result.exit_code == 2 and "one tracker run per upload" in result.output
