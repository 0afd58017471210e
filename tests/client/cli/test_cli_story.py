"""Issue 12 item 6: the CLI in pipelines and by name — quiet exit 0 on a closed pipe, JSON on stdout by default,
runs by id or project/name, `delete`, `analysis --wide`, and thresholds / GPU / TE version on recommend and gate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from fp8_policy.client.cli import cli
from tests.client.fakes import FakeService, layer, run_body

ROOT = Path(__file__).resolve().parents[3]


class StoryService(FakeService):
    """FakeService plus the run list (two pages), DELETE and POST .../recommendation."""

    def __init__(self) -> None:
        super().__init__()
        self.runs[9] = [run_body(9, name="esm2-650m", project="esm2")]  # newer run of the same name
        self.analyses[9] = self.analyses[7]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        parts = request.url.path.strip("/").split("/")
        if request.method == "GET" and parts == ["api", "v1", "runs"]:
            self.requests.append(request)
            project = request.url.params.get("project")
            items = [
                states[-1] for _, states in sorted(self.runs.items(), reverse=True) if states[-1]["project"] == project
            ]
            if request.url.params.get("cursor") is None:
                return httpx.Response(200, json={"items": items[:1], "next_cursor": "2"})
            return httpx.Response(200, json={"items": items[1:], "next_cursor": None})
        if request.method == "DELETE":
            self.requests.append(request)
            self.runs.pop(int(parts[3]))
            return httpx.Response(204)
        if request.method == "POST" and parts[-1] == "recommendation":
            response = super().__call__(request)
            if request.url.params.get("format", "json") != "json":
                return response
            return httpx.Response(200, json={**response.json(), "posted": json.loads(request.content)})
        return super().__call__(request)


@pytest.fixture
def service() -> StoryService:
    return StoryService()


@pytest.fixture
def invoke(service, mock_client):
    client = mock_client(service)

    def run(*args: str, input: str | None = None):  # noqa: A002 - click's name
        return CliRunner().invoke(cli, list(args), obj=client, input=input)

    return run


def test_recommend_json_is_json_on_stdout_and_the_summary_only_when_asked(invoke) -> None:
    result = invoke("recommend", "7")
    assert result.exit_code == 0 and json.loads(result.stdout)["fp8_skip_layers"] == ["model.lm_head"]
    assert json.loads(invoke("recommend", "7", "--format", "json").stdout)["run_id"] == 7
    summary = invoke("recommend", "7", "--summary").stdout
    assert summary.startswith("- Keep in BF16 (`fp8_skip_layers`, 1): `model.lm_head`\n")


def test_runs_are_named_by_project_and_name_everywhere(invoke, service) -> None:
    assert json.loads(invoke("status", "esm2/esm2-650m", "--json").stdout)["id"] == 9  # the newest of that name
    assert json.loads(invoke("status", "esm2/healthy", "--json").stdout)["id"] == 8  # found on the second page
    assert json.loads(invoke("recommend", "esm2/healthy").stdout)["run_id"] == 8
    assert invoke("analysis", "esm2/esm2-650m").exit_code == 0
    assert invoke("compare", "esm2/healthy", "7").exit_code == 0
    compare = next(r for r in service.requests if r.url.path == "/api/v1/compare")
    assert (compare.url.params["base"], compare.url.params["head"]) == ("8", "7")
    missing = invoke("status", "esm2/nope")
    assert missing.exit_code == 2 and "no run named 'nope' in project 'esm2'" in missing.stderr
    bad = invoke("status", "esm2")
    assert bad.exit_code == 2 and "neither a run id nor project/name" in bad.stderr


def test_delete_calls_delete_after_confirmation(invoke, service) -> None:
    assert invoke("delete", "8", input="n\n").exit_code == 1 and 8 in service.runs
    result = invoke("delete", "esm2/healthy", "--yes")
    assert result.exit_code == 0 and result.stdout == "deleted run 8\n" and 8 not in service.runs
    assert [r.method for r in service.requests if r.method == "DELETE"] == ["DELETE"]


def test_analysis_wide_lists_every_layer_uncut(invoke) -> None:
    narrow, wide = invoke("analysis", "7").stdout, invoke("analysis", "7", "--wide").stdout
    assert "model.x.1.fc1" not in narrow  # an ok layer: only the worst are listed normally
    assert "model.x.1.fc1" in wide and "GRADIENT UF MAX" in wide


def test_analysis_wide_says_n_a_where_the_dashboard_does(invoke, service) -> None:
    # A BF16 layer's row used to print `ok` (its `severity`) where the dashboard shows n/a: the verdict is printed.
    bf16 = {**layer("model.x.0.fc1", "ok", None), "status": "bf16", "verdict": "n/a", "patterns": []}
    service.analyses[7] = {**service.analyses[7], "layers": [bf16, *service.analyses[7]["layers"]]}

    wide = invoke("analysis", "7", "--wide").stdout

    (line,) = [text for text in wide.splitlines() if text.startswith("model.x.0.fc1")]
    assert line.split()[1:3] == ["bf16", "n/a"]


def test_thresholds_gpu_and_te_version_recompute_recommend_and_gate(invoke, service) -> None:
    result = invoke(
        "recommend",
        "7",
        "--threshold",
        "critical=3",
        "--threshold",
        "severe=6",
        "--gpu",
        "B200",
        "--te-version",
        "2.13",
        "--previous-run",
        "esm2/healthy",
    )
    posted = json.loads(result.stdout)["posted"]
    assert posted == {
        "thresholds": {"critical": 3.0, "severe": 6.0},
        "gpu": "B200",
        "te_version": "2.13",
        "previous_run": 8,
    }
    assert invoke("gate", "7", "--threshold", "critical=3", "--gpu", "h100").exit_code in (0, 1)
    analysis = [r for r in service.requests if r.url.path.endswith("/analysis")][-1]
    assert analysis.url.params["critical"] == "3.0"
    post = [r for r in service.requests if r.method == "POST" and r.url.path.endswith("/recommendation")][-1]
    assert json.loads(post.content) == {"thresholds": {"critical": 3.0}, "gpu": "h100"}
    bad = invoke("recommend", "7", "--threshold", "critical")
    assert bad.exit_code == 2 and "is not NAME=NUMBER" in bad.stderr


SCRIPT = textwrap.dedent("""
    import httpx, sys
    from fp8_policy.client.cli import cli
    from fp8_policy.client.client import PolicyClient
    from tests.client.fakes import FakeService, RECOMMENDATION
    RECOMMENDATION["fp8_skip_layers"] = ["model.layers.%d.fc1" % i for i in range(20000)]  # > a pipe buffer
    client = PolicyClient("http://fp8-policy.test", transport=httpx.MockTransport(FakeService()))
    cli.main(args=sys.argv[1:], obj=client, prog_name="fp8-policy")
""")


@pytest.mark.parametrize(
    "args", [["recommend", "7"], ["recommend", "7", "--summary"], ["analysis", "7", "--wide"], ["status", "7"]]
)
def test_a_closed_pipe_exits_0_quietly(args) -> None:
    """`fp8-policy recommend 7 | head -1`: the reader is gone before the output is written."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `head` after its first line: every write now raises EPIPE
    try:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr == b""
