"""`PolicyClient.update_run` and `fp8-policy edit` against the real app on a loopback port (no mocks): notes and
tags are stored, left-out fields kept, a refused edit exits 2 with the service's code and stores nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from click.testing import CliRunner

from fp8_policy.client import ApiError, PolicyClient
from fp8_policy.service.cli import cli
from tests.support.archives import stats_log
from tests.support.uvicorn_app import sqlite_service

PROJECT = "edits"


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with sqlite_service(tmp_path_factory.mktemp("edit-contract")) as live:
        yield live.url


_made = iter(range(1, 10_000))


@pytest.fixture
def run_id(url: str) -> int:
    marker = next(_made) / 10_000  # different bytes each time: a new run
    data = stats_log([("model.layers.1.fc1_gradient_underflows%", it, marker + it / 100) for it in (0, 10)])
    response = httpx.post(
        f"{url}/api/v1/runs",
        data={"project": PROJECT, "name": f"run-{marker}", "tags": "first"},
        files={"file": ("run.log", data, "text/plain")},
    )
    assert response.status_code == 202, response.text
    return response.json()["id"]


def edit(url: str, *args: str):
    return CliRunner().invoke(cli, ["edit", *args, "--url", url])


def test_update_run_sets_and_keeps_fields(url: str, run_id: int) -> None:
    with PolicyClient(url) as client:
        both = client.update_run(run_id, notes="line one\nline two", tags=["a", "b"])
        tags_only = client.update_run(run_id, tags=["c"])
        cleared = client.update_run(run_id, notes=None)

    assert (both["notes"], sorted(both["tags"])) == ("line one\nline two", ["a", "b"])
    assert (tags_only["notes"], tags_only["tags"]) == ("line one\nline two", ["c"])
    assert (cleared["notes"], cleared["tags"]) == (None, ["c"])


def test_update_run_refuses_one_string_as_tags(url: str, run_id: int) -> None:
    with PolicyClient(url) as client, pytest.raises(TypeError):
        client.update_run(run_id, tags="a,b")


def test_edit_command_stores_notes_and_tags(url: str, run_id: int) -> None:
    result = edit(url, str(run_id), "--notes", "baseline for the sweep", "--tag", "nightly", "--tag", "h100")

    assert result.exit_code == 0, result.output
    assert "notes      baseline for the sweep" in result.stdout.splitlines()
    with PolicyClient(url) as client:
        run = client.run(run_id)
    assert (run["notes"], sorted(run["tags"])) == ("baseline for the sweep", ["h100", "nightly"])

    by_name = edit(url, f"{PROJECT}/{run['name']}", "--no-tags", "--json")  # a run by project/name too
    assert by_name.exit_code == 0, by_name.output
    assert (json.loads(by_name.stdout)["notes"], json.loads(by_name.stdout)["tags"]) == ("baseline for the sweep", [])

    cleared = edit(url, str(run_id), "--notes", "", "--json")
    assert json.loads(cleared.stdout)["notes"] is None


def test_a_refused_edit_exits_2_and_stores_nothing(url: str, run_id: int) -> None:
    result = edit(url, str(run_id), "--notes", "kept out", "--tag", "bad\ttag")

    assert result.exit_code == 2
    assert "BadRequest" in result.stderr and "control character" in result.stderr
    with PolicyClient(url) as client:
        run = client.run(run_id)
        with pytest.raises(ApiError) as refused:
            client.update_run(run_id, notes="nul \x00 here")
    assert (run["notes"], run["tags"]) == (None, ["first"])
    assert refused.value.status == 400


@pytest.mark.parametrize(
    ("args", "message"),
    [((), "nothing to change"), (("--tag", "a", "--no-tags"), "contradict")],
)
def test_edit_needs_something_consistent_to_change(url: str, args: tuple[str, ...], message: str) -> None:
    result = edit(url, "1", *args)

    assert result.exit_code == 2
    assert message in result.stderr
