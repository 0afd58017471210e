"""Listings in the CLI (`runs`, `alert list`, `alert log`), with and without anything to list: a new service has
no runs, and the first `fp8-policy runs` crashed on the empty table."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from click.testing import CliRunner

from fp8_policy.client.cli import cli
from fp8_policy.client.cli.common import table
from tests.client.fakes import run_body


def listing(items: dict[str, list[dict]]) -> Callable[[httpx.Request], httpx.Response]:
    """A service whose list routes answer `items[path]` (runs as a page, alerts as a JSON list)."""

    def handler(request: httpx.Request) -> httpx.Response:
        found = items[request.url.path]
        body = {"items": found, "next_cursor": None} if request.url.path == "/api/v1/runs" else found
        return httpx.Response(200, json=body)

    return handler


@pytest.fixture
def invoke(mock_client):
    def run(items: dict[str, list[dict]], *args: str):
        return CliRunner().invoke(cli, list(args), obj=mock_client(listing(items)))

    return run


def test_a_table_without_rows_is_its_header_line() -> None:
    assert table(["id", "name"], []) == "ID  NAME"
    assert table(["id", "name"], [[7, "esm2"]]).splitlines() == ["ID  NAME", "7   esm2"]


def test_runs_on_an_empty_service_says_how_to_add_one_and_prints_no_rows(invoke) -> None:
    result = invoke({"/api/v1/runs": []}, "runs")

    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert result.stderr == "no runs yet: `fp8-policy upload LOG_DIR` sends one\n"


def test_runs_with_a_filter_and_no_match_says_so(invoke) -> None:
    result = invoke({"/api/v1/runs": []}, "runs", "--project", "nope")

    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "no runs match these filters\n")


def test_runs_lists_the_page_as_a_table(invoke) -> None:
    result = invoke({"/api/v1/runs": [run_body(7), run_body(8, name="healthy")]}, "runs")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["ID", "NAME", "PROJECT", "STATUS", "VERDICT", "LAYERS", "CREATED"]
    assert [line.split()[:2] for line in lines[1:]] == [["7", "esm2-650m"], ["8", "healthy"]]
    assert result.stderr == ""


def test_alert_rules_and_log_without_entries_say_so(invoke) -> None:
    rules = invoke({"/api/v1/alerts/rules": []}, "alert", "list", "--project", "esm2")
    log = invoke({"/api/v1/alerts/log": []}, "alert", "log", "--run", "3")

    assert (rules.exit_code, rules.stdout, rules.stderr) == (0, "", "no alert rules for project esm2\n")
    assert (log.exit_code, log.stdout, log.stderr) == (0, "", "no alerts raised for run 3\n")


def test_runs_shows_each_runs_verdict_and_a_live_run_as_training(invoke) -> None:
    summary = {"severity": "critical", "pattern": "u_shape", "to_bf16": 3, "precision_mix": {"nvfp4": 41, "mxfp8": 8}}
    runs = [run_body(7, summary=summary), run_body(8, status="live", name="job"), run_body(9, status="queued")]

    result = invoke({"/api/v1/runs": runs}, "runs", "--status", "live")

    assert result.exit_code == 0, result.output
    rows = result.stdout.splitlines()[1:]
    assert "critical u_shape, 3 to BF16, 41 nvfp4 8 mxfp8" in rows[0]
    assert "training" in rows[1] and rows[2].split()[4] == "-"


def test_runs_sends_the_metadata_filters_and_says_when_none_match(mock_client) -> None:
    seen: list[httpx.URL] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url)
        return httpx.Response(200, json={"items": [], "next_cursor": None})

    args = ["runs", "--gpu", "H100", "--recipe", "mxfp8", "--te-version", "2.8", "--commit", "3f2a"]
    result = CliRunner().invoke(cli, args, obj=mock_client(handler))

    assert (result.exit_code, result.stderr) == (0, "no runs match these filters\n")
    params = dict(seen[0].params)
    assert {k: params[k] for k in ("gpu", "recipe", "te_version", "git_commit")} == {
        "gpu": "H100",
        "recipe": "mxfp8",
        "te_version": "2.8",
        "git_commit": "3f2a",
    }
