"""The `te-monitor` format from the client: `PolicyClient.monitor_config` and `fp8-policy recommend --format te-monitor`."""

from __future__ import annotations

from pathlib import Path

import httpx
from click.testing import CliRunner

from fp8_policy.client import FORMATS
from fp8_policy.client.cli import cli

YAML = "# monitor\nremaining_layers_stats:\n  enabled: true\n"


def handler(seen: list[httpx.Request]):
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, text=YAML, headers={"content-type": "application/yaml"})

    return handle


def test_monitor_config_fetches_te_monitor_and_writes_it(mock_client, tmp_path: Path) -> None:
    seen: list[httpx.Request] = []
    client = mock_client(handler(seen))
    target = tmp_path / "sub" / "te_monitor.yaml"
    assert client.monitor_config(7, target) == YAML
    assert target.read_text() == YAML
    assert (seen[0].method, seen[0].url.path, seen[0].url.params["format"]) == (
        "GET",
        "/api/v1/runs/7/recommendation",
        "te-monitor",
    )


def test_monitor_config_with_overrides_recomputes_by_post(mock_client) -> None:
    seen: list[httpx.Request] = []
    client = mock_client(handler(seen))
    assert client.monitor_config(7, overrides={"gpu_arch": "blackwell"}) == YAML
    assert seen[0].method == "POST" and seen[0].url.params["format"] == "te-monitor"


def test_cli_recommend_takes_the_te_monitor_format(mock_client, tmp_path: Path) -> None:
    assert "te-monitor" in FORMATS
    seen: list[httpx.Request] = []
    out = tmp_path / "te_monitor.yaml"
    result = CliRunner().invoke(
        cli, ["recommend", "7", "--format", "te-monitor", "-o", str(out)], obj=mock_client(handler(seen))
    )
    assert result.exit_code == 0, result.output
    assert out.read_text() == YAML
    assert seen[0].url.params["format"] == "te-monitor"
