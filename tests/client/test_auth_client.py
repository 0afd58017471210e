"""`PolicyClient` and the client CLI against a real service that has access tokens (uvicorn on loopback, its own
database): FP8_POLICY_TOKEN is picked up, an explicit token wins, 401/403 become `Unauthorized`/`Forbidden`
and, in the CLI, one `error: <Code>: <detail>` line with exit status 2."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from fp8_policy.client import Forbidden, PolicyClient, Unauthorized
from fp8_policy.client.cli import cli
from fp8_policy.db.migrate import upgrade
from fp8_policy.service.settings import Settings
from tests.support.archives import stats_log, stats_relpath, write_tree
from tests.support.authutil import make_token
from tests.support.uvicorn_app import live_service


@dataclass(frozen=True)
class Service:
    url: str
    tokens: dict[str, str]  # scope -> token
    names: dict[str, str]  # scope -> token name


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    root = tmp_path_factory.mktemp("auth-client")
    url = f"sqlite+pysqlite:///{root / 'app.db'}"
    upgrade(url)
    made = {scope: make_token(url, scope) for scope in ("read", "upload", "admin")}
    settings = Settings(_env_file=None, data_dir=root / "data", database_url=url)
    with live_service(settings) as live:
        yield Service(live.url, {s: t for s, (_n, t) in made.items()}, {s: n for s, (n, _t) in made.items()})


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    value = uuid.uuid4().int % 1000 / 1000
    points = [("model.layers.1.fc1_gradient_underflows%", it, value + it / 100) for it in range(0, 50, 10)]
    return write_tree(tmp_path / "fp8_log_dir", {stats_relpath(0): stats_log(points)})


@pytest.fixture
def no_env_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FP8_POLICY_TOKEN", raising=False)


def test_the_client_uses_fp8_policy_token(service: Service, monkeypatch: pytest.MonkeyPatch, log_dir: Path) -> None:
    monkeypatch.setenv("FP8_POLICY_TOKEN", service.tokens["upload"])
    with PolicyClient(service.url) as client:
        run = client.wait(client.upload(log_dir, project="auth-client")["id"], timeout=60)
    assert run["status"] == "ready" and run["uploaded_by"] == service.names["upload"]


def test_without_a_token_the_client_raises_unauthorized(service: Service, no_env_token: None) -> None:
    with PolicyClient(service.url) as client, pytest.raises(Unauthorized) as caught:
        client.runs()
    assert (caught.value.status, caught.value.error) == (401, "TokenRequired")
    assert "FP8_POLICY_TOKEN" in caught.value.detail


def test_an_explicit_token_wins_over_the_environment(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FP8_POLICY_TOKEN", "fp8p_00000000_" + "A" * 43)
    with PolicyClient(service.url, token=service.tokens["admin"]) as client:
        assert client.runs()["items"] is not None
    with PolicyClient(service.url) as client, pytest.raises(Unauthorized) as caught:
        client.runs()
    assert caught.value.error == "InvalidToken"


def test_a_read_token_cannot_upload_or_delete(service: Service, no_env_token: None, log_dir: Path) -> None:
    with PolicyClient(service.url, token=service.tokens["read"]) as client:
        with pytest.raises(Forbidden) as caught:
            client.upload(log_dir, project="auth-client")
        assert (caught.value.status, caught.value.error) == (403, "InsufficientScope")
        with pytest.raises(Forbidden):
            client.delete(1)


def test_the_cli_reads_fp8_policy_token(service: Service, no_env_token: None, log_dir: Path) -> None:
    runner = CliRunner()
    env = {"FP8_POLICY_URL": service.url, "FP8_POLICY_TOKEN": service.tokens["read"]}

    listed = runner.invoke(cli, ["runs", "--json"], env=env)
    assert listed.exit_code == 0, listed.output

    refused = runner.invoke(cli, ["upload", str(log_dir), "--project", "auth-client"], env=env)
    assert refused.exit_code == 2
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("error: InsufficientScope: ") and "needs upload" in line


def test_the_cli_without_a_token_says_so_in_one_line(service: Service, no_env_token: None) -> None:
    result = CliRunner().invoke(cli, ["runs"], env={"FP8_POLICY_URL": service.url, "FP8_POLICY_TOKEN": None})
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: TokenRequired: this service needs an access token")
