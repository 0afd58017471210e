"""`fp8-policy token create|list|revoke` on the database of FP8_POLICY_DATABASE_URL, and `serve` refusing a
non-loopback address without tokens unless --allow-anonymous (uvicorn replaced: nothing is bound)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from fp8_policy.service import cli as server_cli
from fp8_policy.service.app import create_app
from fp8_policy.service.auth import binding
from fp8_policy.service.settings import Settings, get_settings
from tests.support.authutil import bearer, read_token_row


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh SQLite database (not migrated: the commands migrate) as FP8_POLICY_DATABASE_URL."""
    url = f"sqlite+pysqlite:///{tmp_path / 'tokens.db'}"
    for field in Settings.model_fields:
        monkeypatch.delenv(f"FP8_POLICY_{field.upper()}", raising=False)
    monkeypatch.setenv("FP8_POLICY_DATABASE_URL", url)
    monkeypatch.setenv("FP8_POLICY_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    yield url
    get_settings.cache_clear()


def run(*args: str):
    return CliRunner().invoke(server_cli.cli, list(args), catch_exceptions=False)


def test_create_prints_the_token_last_and_it_works_against_the_service(database: str, tmp_path: Path) -> None:
    result = run("token", "create", "--name", "ci", "--scope", "upload", "--expires-days", "30")

    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    token = lines[-1]
    row = read_token_row(database, "ci")
    assert token.startswith(row.prefix + "_") and row.scope == "upload" and row.expires_at is not None
    assert row.token_hash not in result.output
    settings = Settings(_env_file=None, data_dir=tmp_path / "data", database_url=database)
    with TestClient(create_app(settings)) as client:
        assert client.get("/api/v1/runs").status_code == 401
        me = client.get("/api/v1/auth/me", headers=bearer(token)).json()
        assert (me["name"], me["scope"]) == ("ci", "upload")


def test_list_shows_every_token_without_the_token_and_revoke_marks_it(database: str) -> None:
    empty = run("token", "list")
    assert empty.stdout == "" and "no tokens" in empty.stderr  # a script reading stdout sees an empty listing
    token = run("token", "create", "--name", "reader", "--scope", "read").stdout.strip().splitlines()[-1]
    run("token", "create", "--name", "boss", "--scope", "admin")

    listing = run("token", "list").output.splitlines()
    assert listing[0].split() == ["NAME", "SCOPE", "PREFIX", "STATE", "CREATED", "LAST", "USED", "EXPIRES", "REVOKED"]
    reader = next(line for line in listing if line.startswith("reader"))
    assert reader.split()[:4] == ["reader", "read", token[:13], "active"]
    assert token not in "\n".join(listing)

    revoked = run("token", "revoke", "reader")
    assert revoked.exit_code == 0 and "revoked token 'reader'" in revoked.output
    assert "note:" not in revoked.output  # `boss` still closes the service
    reader = next(line for line in run("token", "list").output.splitlines() if line.startswith("reader"))
    assert reader.split()[3] == "revoked"
    last = run("token", "revoke", "boss")
    assert "no unrevoked token is left" in last.output


@pytest.mark.parametrize(
    "args, error",
    [
        (["token", "revoke", "nobody"], "error: TokenNotFound: no token named 'nobody'"),
        (["token", "create", "--name", "bad name", "--scope", "read"], "error: InvalidTokenName:"),
    ],
)
def test_errors_are_one_line_and_exit_2(database: str, args: list[str], error: str) -> None:
    result = run(*args)
    assert result.exit_code == 2
    assert result.stderr.strip().startswith(error) and len(result.stderr.strip().splitlines()) == 1


def test_a_taken_name_is_refused(database: str) -> None:
    run("token", "create", "--name", "twice", "--scope", "read")
    result = run("token", "create", "--name", "twice", "--scope", "admin")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: TokenNameTaken:")


def test_list_json(database: str) -> None:
    run("token", "create", "--name", "j", "--scope", "read")
    import json

    (info,) = json.loads(run("token", "list", "--json").stdout)
    assert (info["name"], info["scope"], info["state"], info["last_used_at"]) == ("j", "read", "active", None)


# ------------------------------------------------------------------------------------------ serve
@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[Settings]:
    """The settings of each app `serve` created; uvicorn's server is replaced, so nothing is bound."""
    import uvicorn

    from fp8_policy.service import app as app_module
    from fp8_policy.service.transport import shutdown, starting

    started: list[Settings] = []
    real_create_app = app_module.create_app

    def recording_create_app(settings: Settings):
        started.append(settings)
        return real_create_app(settings)

    class NotServing:
        def __init__(self, _config: object, **_options: object) -> None:  # stop_seconds, on_signal
            pass

        def run(self, sockets: object = None) -> None:
            pass

    monkeypatch.setattr(app_module, "create_app", recording_create_app)
    monkeypatch.setattr(starting, "listen", lambda host, port: [])  # `serve` binds first: not port 8000 for real
    monkeypatch.setattr(uvicorn, "Server", NotServing)
    monkeypatch.setattr(shutdown, "BoundedShutdownServer", NotServing)  # what `serve` runs (a uvicorn.Server)
    return started


def test_serve_refuses_a_public_address_without_tokens(database: str, served: list[Settings]) -> None:
    result = run("serve", "--host", "0.0.0.0", "--no-demo")
    assert result.exit_code == 2
    assert served == []
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: refusing to serve on 0.0.0.0 without access tokens")
    assert "--allow-anonymous" in line


def test_serve_on_a_public_address_with_allow_anonymous_or_a_token(database: str, served: list[Settings]) -> None:
    assert run("serve", "--host", "0.0.0.0", "--no-demo", "--allow-anonymous").exit_code == 0
    run("token", "create", "--name", "admin", "--scope", "admin")
    assert run("serve", "--host", "0.0.0.0", "--no-demo").exit_code == 0
    assert [s.allow_anonymous for s in served] == [True, False]


def test_serve_on_loopback_without_tokens_stays_open(database: str, served: list[Settings]) -> None:
    assert run("serve", "--host", "127.0.0.1", "--no-demo").exit_code == 0
    assert served[0].allow_anonymous is True


@pytest.mark.parametrize(
    "host, loopback",
    [
        ("127.0.0.1", True),
        ("127.8.0.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.1.2.3", False),
        ("fp8-policy.internal", False),
    ],
)
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert binding.is_loopback(host) is loopback


@pytest.mark.parametrize(
    ("module", "args"),
    [
        ("fp8_policy.cli", ["token", "list"]),  # the console script's group
        ("fp8_policy.service.cli", ["token", "list"]),
        ("fp8_policy.cli", ["db", "upgrade"]),
    ],
)
def test_a_closed_pipe_exits_0_quietly_as_the_client_commands_do(database: str, module: str, args: list[str]) -> None:
    """`fp8-policy token list | head -1`: the reader is gone before the output is written (click alone exits 1)."""
    if args == ["token", "list"]:
        run("token", "create", "--name", "reader", "--scope", "read")  # a row on stdout (none: a note on stderr)
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `head` after its first line: every write now raises EPIPE
    try:
        done = subprocess.run(
            [sys.executable, "-m", module, *args], stdout=write_end, stderr=subprocess.PIPE, timeout=120, check=False
        )
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (0, b"")
