"""`fp8-policy compare` with 3-8 runs (issue 21 item 4): each run's verdict and recommendation side by side from
GET /api/v1/compare/runs, against the real service; two runs keep the base -> head report; fewer than 2 or more
than 8 is a usage error before any request."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from fp8_policy.client import PolicyClient
from fp8_policy.client.cli import cli
from tests.support.api_runs import live_server, sqlite_client, sqlite_settings, upload_runs


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, int]]]:
    root: Path = tmp_path_factory.mktemp("compare-cli")
    for client in sqlite_client(root):  # store the runs first, then serve the same database over HTTP
        ids = upload_runs(client, root, "compare-cli")
    with live_server(sqlite_settings(root)) as url:
        yield url, ids


def compare(url: str, *refs: object):
    return CliRunner().invoke(cli, ["compare", *map(str, refs), "--url", url])


def test_three_runs_print_side_by_side_with_the_differences_marked(served) -> None:
    url, ids = served
    runs = [ids["u_shape"], ids["rank_outlier"], ids["overflow"]]
    with PolicyClient(url) as client:
        body = client.compare_runs(runs)
    result = compare(url, *runs[:2], "compare-cli/overflow")  # ids or project/name

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert (
        lines[0]
        == f"compare  run {runs[0]} u_shape, run {runs[1]} rank_outlier, run {runs[2]} overflow (first: the reference)"
    )
    assert lines[1 : 1 + len(body["summary"])] == [f"- {s}" for s in body["summary"]]
    header = next(line for line in lines if "DIFFERS" in line)
    assert header.split() == ["RUN", str(runs[0]), "RUN", str(runs[1]), "RUN", str(runs[2]), "DIFFERS"]
    rows = {row["key"]: row for row in body["table"]}
    verdict = next(line for line in lines if line.startswith("Verdict"))
    assert verdict.split()[1:4] == [run["severity"] for run in body["runs"]]
    assert verdict.rstrip().endswith("*") == rows["severity"]["differs"]
    recipe = next(line for line in lines if line.startswith("Recommended recipe"))
    assert recipe.split()[2:5] == [value["name"] for value in rows["recipe"]["values"]]
    assert (
        lines[-1]
        == f"layers: {body['common_layers']} in every run, {sum(r['differs'] for r in body['layers'])} of {len(body['layers'])} differ"
    )

    as_json = CliRunner().invoke(cli, ["compare", *map(str, runs), "--url", url, "--json"])
    assert as_json.exit_code == 0 and '"table"' in as_json.stdout


def test_two_runs_keep_the_base_head_report(served) -> None:
    url, ids = served
    result = compare(url, ids["u_shape"], ids["rank_outlier"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(
        f"base  run {ids['u_shape']} u_shape\nhead  run {ids['rank_outlier']} rank_outlier\n"
    )


@pytest.mark.parametrize("count", [1, 9])
def test_fewer_than_two_or_more_than_eight_is_a_usage_error(served, count: int) -> None:
    url, _ = served
    result = compare(url, *range(1, count + 1))
    assert result.exit_code == 2 and f"compare takes 2-8 runs, got {count}" in result.output


def test_a_run_not_ready_is_named(served) -> None:
    url, ids = served
    result = compare(url, ids["u_shape"], ids["rank_outlier"], ids["failed"])
    assert result.exit_code != 0
    assert f"run {ids['failed']} is failed" in result.output
