"""`fp8-policy configs` and PolicyClient's kept-config methods against the real service: keep rendered configs
with a run, list them, fetch one byte for byte as GET .../recommendation?format= handed it out."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from fp8_policy.client import PolicyClient
from fp8_policy.client.cli import cli
from tests.conftest import upload, wait_for_run
from tests.support.api_runs import live_server, sqlite_client, sqlite_settings
from tests.support.archives import stats_log

LAYERS = ("model.layers.0.mlp.fc1", "model.layers.1.mlp.fc1")


def small_log() -> bytes:
    return stats_log(
        [
            (f"{layer}_{tensor}_underflows%", it, (40.0 if layer == LAYERS[1] else 0.1) + it / 1000)
            for layer in LAYERS
            for tensor in ("activation", "gradient")
            for it in range(0, 100, 10)
        ]
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    root: Path = tmp_path_factory.mktemp("configs-cli")
    for client in sqlite_client(root):  # store the run first, then serve the same database over HTTP
        response = upload(client, small_log(), project="cfg", content_type="text/plain", name="small")
        run = wait_for_run(client, response.json()["id"])
        assert run["status"] == "ready", run
    with live_server(sqlite_settings(root)) as url:
        yield url, int(run["id"])


def invoke(url: str, *args: str):
    return CliRunner().invoke(cli, [*args, "--url", url])


def test_keep_list_and_get_a_config(served, tmp_path: Path) -> None:
    url, run_id = served

    kept = invoke(url, "configs", "cfg/small", "--keep", "te-yaml", "--keep", "json", "--json")
    again = invoke(url, "configs", str(run_id), "--keep", "te-yaml")
    listed = invoke(url, "configs", str(run_id))
    items = {item["format"]: item for item in json.loads(kept.stdout)}
    printed = invoke(url, "configs", str(run_id), "--get", str(items["te-yaml"]["id"]))
    written = invoke(url, "configs", str(run_id), "--get", str(items["json"]["id"]), "-o", str(tmp_path / "p.json"))

    assert kept.exit_code == 0, kept.output
    assert again.exit_code == 0 and "no (same file)" in again.stdout
    assert listed.exit_code == 0 and listed.stdout.splitlines()[0].split()[:3] == ["ID", "FORMAT", "VERSION"]
    assert len(listed.stdout.splitlines()) == 3  # two kept configs, the second keep added none
    with PolicyClient(url) as client:
        assert printed.stdout_bytes == client.recommendation(run_id, format="te-yaml").encode()
        assert (tmp_path / "p.json").read_bytes() == client.config_content(run_id, items["json"]["id"])
        assert [c["id"] for c in client.configs(run_id, format="json")] == [items["json"]["id"]]
    assert written.exit_code == 0


def test_no_configs_yet_and_usage_errors(served) -> None:
    url, run_id = served

    with PolicyClient(url) as client:
        none = client.configs(run_id, format="torchao")
    both = invoke(url, "configs", str(run_id), "--keep", "hydra", "--get", "1")
    output_alone = invoke(url, "configs", str(run_id), "-o", "x.yaml")

    assert none == []
    assert both.exit_code == 2 and "one at a time" in both.output
    assert output_alone.exit_code == 2 and "goes with --get" in output_alone.output
