"""Shared pytest fixtures for fp8-policy.

Sections:
  1. Throwaway PostgreSQL cluster  (postgres_server)
  2. Database URLs                 (database_url: sqlite + postgresql)
  3. App / DB fixtures             (reserved for the lead)
"""

from __future__ import annotations

import os

import pytest

from tests.pg_cluster import PostgresUnavailable, ThrowawayPostgres


# ===========================================================================
# 1. Throwaway PostgreSQL cluster
# ===========================================================================
#
# Started lazily: only when a test (directly or via database_url[postgresql])
# asks for it; one cluster per test session (per xdist worker).
#
# Missing PostgreSQL is an error, never a silent skip -- CI must go red.
# Set FP8_POLICY_SKIP_POSTGRES=1 to skip PostgreSQL-backed tests explicitly
# (reported as skips with -ra), or deselect them with `-m "not postgres"`.

def _skip_postgres_requested() -> bool:
    return os.environ.get("FP8_POLICY_SKIP_POSTGRES", "").strip() == "1"


@pytest.fixture(scope="session")
def postgres_server():
    """The session's ThrowawayPostgres (see tests/pg_cluster.py for its API)."""
    if _skip_postgres_requested():
        pytest.skip("FP8_POLICY_SKIP_POSTGRES=1: PostgreSQL-backed tests skipped")
    server = ThrowawayPostgres()
    unavailable = None
    try:
        server.start()
    except PostgresUnavailable as exc:
        unavailable = str(exc)
    if unavailable is not None:
        pytest.fail(unavailable, pytrace=False)  # fail, do not skip: CI must notice
    try:
        yield server
    finally:
        server.close()


# ===========================================================================
# 2. Database URLs
# ===========================================================================

@pytest.fixture(
    scope="session",
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    ],
)
def database_url(request, tmp_path_factory) -> str:
    """A fresh, empty database URL per backend (SQLAlchemy form).

    sqlite:      sqlite+pysqlite:////<tmp>/test.db
    postgresql:  postgresql+psycopg://postgres@127.0.0.1:<port>/<new db>
    """
    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("sqlite") / "test.db"
        return f"sqlite+pysqlite:///{path}"
    server = request.getfixturevalue("postgres_server")
    return server.create_database()


# ===========================================================================
# 3. App / DB fixtures
# ===========================================================================
