"""Fixtures the database tests share: an empty database of the backend under test, and its engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from fp8_policy.db.session import create_db_engine


@pytest.fixture
def fresh_url(database_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """An empty database of the same backend as `database_url` (never the shared one)."""
    if database_url.startswith("sqlite"):
        return f"sqlite+pysqlite:///{tmp_path / 'fresh.db'}"
    return request.getfixturevalue("postgres_server").create_database()


@pytest.fixture
def fresh_engine(fresh_url: str) -> Iterator[Engine]:
    engine = create_db_engine(fresh_url)
    yield engine
    engine.dispose()
