"""The client commands through click's CliRunner, with a `PolicyClient` over `httpx.MockTransport` injected."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from fp8_policy.client.cli import cli
from tests.client.fakes import FakeService, run_body


@pytest.fixture
def service() -> FakeService:
    return FakeService()


@pytest.fixture
def invoke(service: FakeService, mock_client):
    """invoke(*args) -> click Result, with the fake service injected as the client."""
    client = mock_client(service)

    def run(*args: str):
        return CliRunner().invoke(cli, list(args), obj=client)

    return run


def test_status_prints_a_readable_summary(invoke) -> None:
    result = invoke("status", "7")

    assert result.exit_code == 0
    assert result.stdout.splitlines()[:4] == [
        "run        7  esm2-650m",
        "project    esm2",
        "status     ready",
        "tags       nightly",
    ]
    assert "iterations 0..200" in result.stdout


def test_json_flag_prints_the_service_json(invoke) -> None:
    result = invoke("status", "7", "--json")

    assert result.exit_code == 0
    assert json.loads(result.stdout) == run_body(7)


def test_api_errors_exit_2_with_code_and_detail_on_stderr(invoke) -> None:
    result = invoke("analysis", "99")

    assert result.exit_code == 2
    assert result.stderr == "error: NotFound: run 99 does not exist\n"
    assert result.stdout == ""


def test_unreachable_url_from_the_environment_exits_2_naming_it() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    result = CliRunner().invoke(cli, ["status", "1"], env={"FP8_POLICY_URL": url, "FP8_POLICY_TOKEN": "t"})

    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: ConnectionFailed: cannot reach the fp8-policy service at {url}: ")
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "args",
    [["gate", "7", "--fail-on", "ok"], ["status", "seven"], ["recommend", "7", "--format", "yaml"], ["heatmap", "7"]],
)
def test_usage_errors_exit_2(invoke, args: list[str]) -> None:
    assert invoke(*args).exit_code == 2


def test_upload_wait_json_prints_the_ready_run(invoke, service: FakeService, tmp_path: Path, clock) -> None:
    service.runs[7] = [run_body(7, "processing"), run_body(7, "ready")]
    log = tmp_path / "nvdlfw_inspect_statistics_logs" / "nvdlfw_inspect_globalrank-0.log"
    log.parent.mkdir()
    log.write_text("stats\n")

    result = invoke(
        "upload",
        str(tmp_path),
        "--name",
        "esm2-650m",
        "--tags",
        "a,b",
        "--metadata",
        '{"gpu": "h100"}',
        "--wait",
        "--json",
    )

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "ready"
    assert clock.sleeps == [0.2]


def test_upload_of_a_directory_without_logs_exits_2(invoke, service: FakeService, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("nothing\n")

    result = invoke("upload", str(tmp_path))

    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: NoLogFiles: {tmp_path} holds no nvdlfw_inspect log files")
    assert service.requests == []


def test_upload_rejects_metadata_that_is_not_a_json_object(invoke, tmp_path: Path) -> None:
    result = invoke("upload", str(tmp_path), "--metadata", "[1, 2]")

    assert result.exit_code == 2
    assert "must be a JSON object" in result.stderr


def test_upload_of_a_failing_ingest_exits_2(invoke, service: FakeService, tmp_path: Path, clock) -> None:
    service.runs[7] = [run_body(7, "failed", error="InvalidArchive: truncated gzip")]
    (tmp_path / "run.tgz").write_bytes(b"x")

    result = invoke("upload", str(tmp_path / "run.tgz"), "--wait")

    assert result.exit_code == 2
    assert result.stderr == "error: IngestFailed: run 7 failed: InvalidArchive: truncated gzip\n"


def test_analysis_prints_findings_and_worst_layers(invoke) -> None:
    lines = invoke("analysis", "7").stdout.splitlines()

    assert lines[0].split() == ["SEVERITY", "PATTERN", "LAYERS", "SUMMARY"]
    assert lines[1].split()[:3] == ["severe", "head_only", "model.lm_head"]
    assert lines[4].split()[:3] == ["LAYER", "SEVERITY", "WORST"]
    assert lines[5].split()[:2] == ["model.lm_head", "severe"]


def test_recommend_writes_the_file_and_says_where(invoke, tmp_path: Path) -> None:
    out = tmp_path / "fp8_policy.yaml"

    result = invoke("recommend", "7", "--format", "te-yaml", "-o", str(out))

    assert result.exit_code == 0
    assert result.stdout == f"wrote the te-yaml policy of run 7 to {out}\n"
    assert out.read_text() == "# te-yaml policy of run 7\n"


def test_recommend_prints_text_formats_and_a_readable_json_summary(invoke) -> None:
    assert invoke("recommend", "7", "--format", "megatron").stdout == "# megatron policy of run 7\n"
    readable = invoke("recommend", "7", "--summary").stdout  # JSON unless a human summary is asked for
    assert readable.startswith("- Keep in BF16 (`fp8_skip_layers`, 1): `model.lm_head`\n")
    assert readable.endswith("rationale:\n  - [severe] head_only\n")
    assert json.loads(invoke("recommend", "7", "--json").stdout)["fp8_skip_layers"] == ["model.lm_head"]


def test_gate_passes_a_healthy_run(invoke) -> None:
    result = invoke("gate", "8")

    assert result.exit_code == 0
    assert result.stdout.startswith("## FP8 policy gate: PASS\n")


def test_gate_fails_at_the_bar_and_appends_the_summary_file(invoke, tmp_path: Path) -> None:
    summary = tmp_path / "step_summary.md"
    summary.write_text("earlier step\n")

    result = invoke("gate", "7", "--summary-file", str(summary))

    assert result.exit_code == 1
    assert result.stdout.startswith("## FP8 policy gate: FAIL\n")
    assert summary.read_text() == "earlier step\n" + result.stdout + "\n"


def test_gate_json_and_a_higher_bar(invoke) -> None:
    result = invoke("gate", "7", "--fail-on", "severe", "--json")

    assert result.exit_code == 1
    body = json.loads(result.stdout)
    assert (body["passed"], body["fail_on"], [f["pattern"] for f in body["failing_findings"]]) == (
        False,
        "severe",
        ["head_only"],
    )
    assert body["recommendation"]["fp8_skip_layers"] == ["model.lm_head"]


def test_gate_waits_for_a_run_still_ingesting(invoke, service: FakeService, clock) -> None:
    service.runs[8] = [run_body(8, "queued"), run_body(8, "processing"), run_body(8, "ready")]

    result = invoke("gate", "8", "--timeout", "30")

    assert result.exit_code == 0
    assert clock.sleeps == [0.2]


def test_gate_of_a_run_that_never_gets_ready_exits_2(invoke, service: FakeService, clock) -> None:
    service.runs[8] = [run_body(8, "processing")]

    result = invoke("gate", "8", "--timeout", "1")

    assert result.exit_code == 2
    assert result.stderr == "error: WaitTimeout: run 8 is still processing after 1 s\n"


def test_compare_prints_the_summary_and_finding_changes(invoke) -> None:
    lines = invoke("compare", "8", "7").stdout.splitlines()

    assert lines[:3] == ["base  run 8 healthy", "head  run 7", "- head gradient underflow +4345% (mean 0.21% → 9.25%)"]
    assert lines[4:7] == [
        "findings appeared:",
        "PATTERN    SEVERITY  LAYERS         SUMMARY",
        "head_only  severe    model.lm_head  head fails",
    ]
    assert lines[-1] == "note: layers match by exact name"


def test_heatmap_saves_the_png(invoke, service: FakeService, tmp_path: Path) -> None:
    result = invoke("heatmap", "7", "-o", str(tmp_path / "h.png"), "--tensor", "activation", "--json")

    assert result.exit_code == 0
    assert service.requests[-1].url.query == b"tensor=activation"
    assert json.loads(result.stdout) == {"run_id": 7, "path": str(tmp_path / "h.png"), "bytes": 9}
    assert (tmp_path / "h.png").read_bytes() == b"\x89PNG fake"


def test_heatmap_into_a_missing_directory_names_the_file_asked_for(invoke, tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "dir" / "h.png"

    result = invoke("heatmap", "7", "-o", str(target))

    assert result.exit_code == 2
    assert result.stderr == f"error: OutputNotWritable: cannot write {target}: no directory {target.parent}\n"
    assert ".part" not in result.stderr


def test_the_console_script_has_the_client_commands() -> None:
    from fp8_policy.service.cli import cli as console

    assert {"serve", "db", "upload", "status", "runs", "analysis", "recommend", "gate", "compare", "heatmap"} <= set(
        console.commands
    )
