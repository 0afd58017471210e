"""Helpers of the access-token tests: a private migrated database per test (tokens change how the whole service
answers, so they never go into the database other tests share), tokens made behind the API's back, headers."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session

from fp8_policy.db.migrate import upgrade
from fp8_policy.db.runs import utcnow
from fp8_policy.db.session import create_db_engine
from fp8_policy.db.token_models import ApiToken
from fp8_policy.service.auth.actions import create_token
from fp8_policy.service.auth.tokens import load_hasher

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
]


def private_database(backend: str, request: pytest.FixtureRequest, directory) -> str:
    """A new, migrated database of `backend` that no other test sees."""
    if backend == "sqlite":
        url = f"sqlite+pysqlite:///{directory / f'auth-{uuid.uuid4().hex[:8]}.db'}"
    else:
        url = request.getfixturevalue("postgres_server").create_database()
    upgrade(url)
    return url


def make_token(
    url: str, scope: str, *, name: str | None = None, expires_days: int | None = None, secret_key: str | None = None
) -> tuple[str, str]:
    """(name, token) of a new token stored in the database at `url`, as `fp8-policy token create` makes it."""
    name = name or f"{scope}-{uuid.uuid4().hex[:8]}"
    engine = create_db_engine(url)
    try:
        with Session(engine) as session, session.begin():
            _row, token = create_token(session, load_hasher(session, secret_key), name, scope, expires_days)
    finally:
        engine.dispose()
    return name, token


def set_token_dates(url: str, name: str, **values: datetime | None) -> None:
    """Overwrite a token's dates (expires_at, revoked_at, last_used_at) directly in the database."""
    engine = create_db_engine(url)
    try:
        with Session(engine) as session, session.begin():
            session.execute(update(ApiToken).where(ApiToken.name == name).values(**values))
    finally:
        engine.dispose()


def read_token_row(url: str, name: str) -> ApiToken:
    engine = create_db_engine(url)
    try:
        with Session(engine) as session:
            return session.query(ApiToken).filter_by(name=name).one()
    finally:
        engine.dispose()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def in_the_past(hours: float = 1) -> datetime:
    return utcnow() - timedelta(hours=hours)
