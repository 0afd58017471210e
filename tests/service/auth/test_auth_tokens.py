"""Access tokens through the API, on SQLite and PostgreSQL, each test on its own database: open and closed
service, scopes on real uploads and deletions, `uploaded_by`, revocation and expiry taking effect at once
(also when another process changes the tokens), the keyed hash, the shared key, and last-use recording."""

from __future__ import annotations

import hashlib
import hmac
import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from fp8_policy.db.runs import utcnow
from fp8_policy.db.session import create_db_engine
from fp8_policy.db.token_models import ServiceSecret
from fp8_policy.service.app import create_app
from fp8_policy.service.settings import Settings
from tests.conftest import wait_for_run
from tests.support.archives import stats_log, stats_relpath, tar_bytes
from tests.support.authutil import (
    BACKENDS,
    bearer,
    in_the_past,
    make_token,
    private_database,
    read_token_row,
    set_token_dates,
)

RUNS = "/api/v1/runs"
UF = "model.layers.1.fc1_gradient_underflows%"


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return private_database(request.param, request, tmp_path)


@pytest.fixture
def app_on(url: str, tmp_path: Path) -> Iterator[Callable[..., TestClient]]:
    """app_on(**settings) -> a started app on the test's private database (several may share it)."""
    with ExitStack() as stack:

        def start(**overrides: object) -> TestClient:
            settings = Settings(_env_file=None, data_dir=tmp_path / "data", database_url=url, **overrides)
            return stack.enter_context(TestClient(create_app(settings)))

        yield start


def archive() -> bytes:
    """A small valid upload, different every call (so it is a new run, not the same bytes again)."""
    marker = uuid.uuid4().int % 1000 / 1000
    return tar_bytes({stats_relpath(0): stats_log([(UF, it, marker + it / 100) for it in range(0, 50, 10)])})


def upload(client: TestClient, headers: dict[str, str] | None = None):
    return client.post(
        RUNS,
        files={"file": ("run.tar.gz", archive(), "application/gzip")},
        data={"project": "auth"},
        headers=headers or {},
    )


# ------------------------------------------------------------------------------------------ open service
def test_without_tokens_a_loopback_service_is_open_and_runs_are_anonymous(app_on) -> None:
    client = app_on()
    response = upload(client)
    assert response.status_code == 202, response.text
    assert response.json()["uploaded_by"] is None
    assert wait_for_run(client, response.json()["id"])["uploaded_by"] is None
    assert client.get("/api/v1/auth/me").json() == {
        "name": None,
        "scope": "admin",
        "anonymous": True,
        "expires_at": None,
    }


def test_without_tokens_and_without_anonymous_access_every_api_call_is_401(app_on) -> None:
    client = app_on(allow_anonymous=False)
    response = client.get(RUNS)
    assert response.status_code == 401
    assert response.json()["error"] == "TokenRequired"
    assert "fp8-policy token create" in response.json()["detail"]
    assert client.get("/healthz").status_code == 200


def test_a_token_created_by_another_process_closes_the_service_on_the_next_request(app_on, url: str) -> None:
    client = app_on()
    assert client.get(RUNS).status_code == 200
    _name, token = make_token(url, "read")  # as `fp8-policy token create` would, behind the app's back

    response = client.get(RUNS)

    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="fp8-policy"'
    assert client.get(RUNS, headers=bearer(token)).status_code == 200


def test_revoking_every_token_opens_a_loopback_service_again_but_expiry_does_not(app_on, url: str) -> None:
    client = app_on()
    expiring, _ = make_token(url, "read", expires_days=1)
    set_token_dates(url, expiring, expires_at=in_the_past())
    assert client.get(RUNS).status_code == 401  # an expired token still closes the service

    set_token_dates(url, expiring, revoked_at=in_the_past())

    assert client.get(RUNS).status_code == 200


# ------------------------------------------------------------------------------------------ scopes in use
def test_read_cannot_upload_upload_cannot_delete_admin_can(app_on, url: str) -> None:
    client = app_on()
    reader, read_token = make_token(url, "read")
    uploader, upload_token = make_token(url, "upload")
    _admin, admin_token = make_token(url, "admin")

    refused = upload(client, bearer(read_token))
    assert refused.status_code == 403
    assert refused.json() == {
        "error": "InsufficientScope",
        "detail": f"the token {reader!r} has scope read; POST /api/v1/runs needs upload",
    }

    created = upload(client, bearer(upload_token))
    assert created.status_code == 202, created.text
    run_id = created.json()["id"]
    assert created.json()["uploaded_by"] == uploader
    run = client.get(f"{RUNS}/{run_id}", headers=bearer(read_token)).json()
    assert run["uploaded_by"] == uploader
    listed = client.get(RUNS, params={"project": "auth"}, headers=bearer(read_token)).json()["items"]
    assert [(r["id"], r["uploaded_by"]) for r in listed] == [(run_id, uploader)]

    assert client.delete(f"{RUNS}/{run_id}", headers=bearer(upload_token)).status_code == 403
    assert client.get(f"{RUNS}/{run_id}", headers=bearer(read_token)).status_code == 200
    client.app.state.ingest.wait_idle(timeout=30)
    assert client.delete(f"{RUNS}/{run_id}", headers=bearer(admin_token)).status_code == 204
    assert client.get(f"{RUNS}/{run_id}", headers=bearer(read_token)).status_code == 404


def test_an_upload_refused_for_its_scope_stores_nothing(app_on, url: str, tmp_path: Path) -> None:
    client = app_on()
    _name, read_token = make_token(url, "read")
    assert upload(client, bearer(read_token)).status_code == 403
    uploads = tmp_path / "data" / "uploads"
    assert not uploads.exists() or not any(uploads.iterdir())
    engine = create_db_engine(url)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM runs")).scalar_one() == 0
    engine.dispose()


def test_me_names_the_token(app_on, url: str) -> None:
    client = app_on()
    name, token = make_token(url, "upload", expires_days=3)
    me = client.get("/api/v1/auth/me", headers=bearer(token)).json()
    assert (me["name"], me["scope"], me["anonymous"]) == (name, "upload", False)
    assert me["expires_at"] is not None


# ------------------------------------------------------------------------------------------ token routes
def test_admin_manages_tokens_over_http_and_a_revoked_token_fails_at_once(app_on, url: str) -> None:
    client = app_on()
    _admin, admin_token = make_token(url, "admin")
    admin = bearer(admin_token)

    created = client.post("/api/v1/tokens", json={"name": "ci-nightly", "scope": "upload"}, headers=admin)
    assert created.status_code == 201, created.text
    assert created.headers["cache-control"] == "no-store"
    token = created.json()["token"]
    assert token.startswith(created.json()["prefix"] + "_")
    assert client.get(RUNS, headers=bearer(token)).status_code == 200

    listing = client.get("/api/v1/tokens", headers=admin).json()
    ci = next(t for t in listing if t["name"] == "ci-nightly")
    assert ci["state"] == "active" and ci["last_used_at"] is not None
    assert all("token" not in t and "token_hash" not in t for t in listing)
    assert token not in str(listing)

    duplicate = client.post("/api/v1/tokens", json={"name": "ci-nightly", "scope": "read"}, headers=admin)
    assert (duplicate.status_code, duplicate.json()["error"]) == (409, "TokenNameTaken")
    bad = client.post("/api/v1/tokens", json={"name": "has space", "scope": "read"}, headers=admin)
    assert (bad.status_code, bad.json()["error"]) == (400, "InvalidTokenName")

    revoked = client.delete("/api/v1/tokens/ci-nightly", headers=admin)
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    after = client.get(RUNS, headers=bearer(token))
    assert (after.status_code, after.json()["error"]) == (401, "TokenRevoked")
    assert 'error="invalid_token"' in after.headers["www-authenticate"]
    assert client.delete("/api/v1/tokens/nobody", headers=admin).status_code == 404


# ------------------------------------------------------------------------------------------ storage and keys
def test_only_a_keyed_hash_is_stored(app_on, url: str) -> None:
    app_on()
    name, token = make_token(url, "read")
    row = read_token_row(url, name)
    engine = create_db_engine(url)
    with Session(engine) as session:
        key = session.scalars(select(ServiceSecret.value).where(ServiceSecret.name == "token_hmac_key")).one()
        with engine.connect() as connection:
            dump = [
                str(r)
                for table in ("api_tokens", "service_secrets", "runs")
                for r in connection.execute(text(f"SELECT * FROM {table}"))
            ]
    engine.dispose()
    assert row.token_hash == hmac.new(key.encode(), token.encode(), hashlib.sha256).hexdigest()
    assert row.token_hash != hashlib.sha256(token.encode()).hexdigest()
    assert token.startswith(row.prefix + "_")
    secret_part = token[len(row.prefix) + 1 :]
    assert not any(secret_part in line for line in dump), "the token itself must never be stored"


def test_processes_on_one_database_share_one_generated_key(app_on, url: str) -> None:
    first, second = app_on(), app_on()
    _admin, admin_token = make_token(url, "admin")  # the CLI's process: generates or reads the key
    made = first.post("/api/v1/tokens", json={"name": "from-first", "scope": "read"}, headers=bearer(admin_token))
    assert second.get(RUNS, headers=bearer(made.json()["token"])).status_code == 200
    engine = create_db_engine(url)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM service_secrets")).scalar_one() == 1
    engine.dispose()


def test_a_configured_secret_key_is_used_and_a_token_from_another_key_is_rejected(
    app_on, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    keyed = app_on(secret_key="a-long-configured-secret-key-0123456789")
    unkeyed = app_on()
    name, token = make_token(url, "read", secret_key="a-long-configured-secret-key-0123456789")
    assert keyed.get(RUNS, headers=bearer(token)).status_code == 200

    with caplog.at_level(logging.WARNING, logger="fp8_policy.auth"):
        response = unkeyed.get(RUNS, headers=bearer(token))

    assert (response.status_code, response.json()["error"]) == (401, "InvalidToken")
    assert any(name in r.getMessage() and "FP8_POLICY_SECRET_KEY" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------------------------------ last use
def test_last_use_is_recorded_at_most_once_a_minute(app_on, url: str) -> None:
    client = app_on()
    name, token = make_token(url, "read")
    assert read_token_row(url, name).last_used_at is None

    client.get(RUNS, headers=bearer(token))
    first = read_token_row(url, name).last_used_at
    assert first is not None and abs(utcnow() - first) < timedelta(minutes=1)
    client.get(RUNS, headers=bearer(token))
    assert read_token_row(url, name).last_used_at == first  # within the minute: no write

    set_token_dates(url, name, last_used_at=in_the_past(hours=2))
    client.get(RUNS, headers=bearer(token))
    assert abs(utcnow() - read_token_row(url, name).last_used_at) < timedelta(minutes=1)
