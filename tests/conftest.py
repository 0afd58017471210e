"""Shared pytest fixtures for fp8-policy.

Sections:
  1. Throwaway PostgreSQL cluster  (postgres_server)
  2. Database URLs                 (database_url: sqlite + postgresql)
  3. App / DB fixtures             (migrated_url, db_engine, app_settings, client,
                                    make_client, project; wait_for_run helper)
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from fp8_policy.db.migrate import upgrade
from fp8_policy.db.session import create_db_engine
from fp8_policy.service.app import create_app
from fp8_policy.service.settings import Settings
from tests.support.pg_cluster import ThrowawayPostgres
from tests.support.pg_processes import PostgresUnavailable

pytest_plugins = ("tests.support.s3",)  # the moto S3 server fixtures (s3_endpoint, s3_bucket)

# Starlette's TestClient addresses its requests to `http://testserver`; a service without tokens answers only
# requests addressed to localhost, an IP address or a name it is configured with (service/auth/hosts.py: DNS
# rebinding), so the suite's test clients address `localhost` by default, as a browser on the machine does. A
# test of another Host passes `base_url` or a `Host` header itself.
TEST_BASE_URL = "http://localhost"
TestClient.__init__.__defaults__ = (TEST_BASE_URL, *(TestClient.__init__.__defaults__ or ())[1:])

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
    """The session's ThrowawayPostgres (see tests/support/pg_cluster.py for its API)."""
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
def database_url(request, tmp_path_factory, _databases: dict[str, str]) -> str:
    """A fresh, empty database URL per backend (SQLAlchemy form), made once per session.

    sqlite:      sqlite+pysqlite:////<tmp>/test.db
    postgresql:  postgresql+psycopg://postgres@127.0.0.1:<port>/<new db>
    """
    if request.param not in _databases:
        if request.param == "sqlite":
            path = tmp_path_factory.mktemp("sqlite") / "test.db"
            _databases["sqlite"] = f"sqlite+pysqlite:///{path}"
        else:
            _databases["postgresql"] = request.getfixturevalue("postgres_server").create_database()
    return _databases[request.param]


@pytest.fixture(scope="session")
def _databases() -> dict[str, str]:
    """backend -> the database `database_url` gave it. pytest sets a parametrized session fixture up again when the
    parameter changes, which under pytest-xdist (a worker runs module after module, each with both backends)
    happens once per module: the one database per backend (and its migration) is kept here instead."""
    return {}


# ===========================================================================
# 3. App / DB fixtures
# ===========================================================================
#
# Every fixture here hangs off `database_url`, so a test that uses any of them
# runs once per backend.  The database is shared by all tests of a backend:
# isolate by giving each test its own `project` (the `project` fixture) and
# only assert on that project's runs.

TERMINAL_STATUSES = ("ready", "failed")


@pytest.fixture(scope="session")
def migrated_url(database_url: str, _migrated: set[str]) -> str:
    """`database_url` with the real Alembic migrations applied once (the schema under test)."""
    if database_url not in _migrated:
        upgrade(database_url)
        _migrated.add(database_url)
    return database_url


@pytest.fixture(scope="session")
def _migrated() -> set[str]:
    """The database URLs `migrated_url` has upgraded (see `_databases`)."""
    return set()


@pytest.fixture(scope="session")
def db_engine(migrated_url: str) -> Iterator[Engine]:
    """A direct engine on the migrated database, for asserting on rows behind the API's back."""
    engine = create_db_engine(migrated_url)
    yield engine
    engine.dispose()


@pytest.fixture
def app_settings(tmp_path: Path, migrated_url: str, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings of a test app: its own data_dir, the shared migrated database, defaults for everything else
    (no .env file, no FP8_POLICY_* variables such as the Makefile's FP8_POLICY_DATA_DIR)."""
    for field in Settings.model_fields:
        monkeypatch.delenv(f"FP8_POLICY_{field.upper()}", raising=False)
    return Settings(_env_file=None, data_dir=tmp_path / "data", database_url=migrated_url)


@pytest.fixture
def client(app_settings: Settings) -> Iterator[TestClient]:
    """The real app with its lifespan (engine, ingest worker, resume of interrupted runs)."""
    with TestClient(create_app(app_settings)) as test_client:
        yield test_client


@pytest.fixture
def make_client(app_settings: Settings) -> Iterator[Callable[..., TestClient]]:
    """`make_client(max_upload_bytes=..., ...)`: a started app with some settings overridden (same data_dir)."""
    with ExitStack() as stack:

        def factory(**overrides: object) -> TestClient:
            settings = app_settings.model_copy(update=overrides)
            return stack.enter_context(TestClient(create_app(settings)))

        yield factory


@pytest.fixture
def project() -> str:
    """A project name no other test uses."""
    return f"test-{uuid.uuid4().hex}"


# A run's ingest figures (GET /api/v1/runs/{id}): a live run's equal those of the same files uploaded whole.
RUN_FIGURES = (
    "ranks",
    "layer_count",
    "series_count",
    "points",
    "iteration_min",
    "iteration_max",
    "lines_read",
    "lines_skipped",
    "lines_blank",
    "lines_duplicated",
)


def upload(
    client: TestClient,
    data: bytes,
    project: str,
    filename: str = "logs.tar.gz",
    content_type: str = "application/gzip",
    **fields: str,
) -> httpx.Response:
    """POST /api/v1/runs as multipart: a `file` part and the given form fields."""
    return client.post(
        "/api/v1/runs", files={"file": (filename, data, content_type)}, data={"project": project, **fields}
    )


def wait_for_run(client: TestClient, run_id: int, timeout: float = 90.0) -> dict:
    """Poll GET /api/v1/runs/{id} until ready or failed; return the body once the worker is idle again.

    Waiting for the worker too means its clean-up (the work directory) is finished when this returns. The bound
    guards against a hang, it is not a speed check: on a clean checkout (CI) a run once stayed 'processing' past
    30 s, twice in tests/service/scalars/test_uploaded_scalars.py::test_a_failed_ingest_stores_no_scalars[sqlite] with
    the numba cache compiled first (tests pass in 1 s here); the cause is not found yet (see the issue notes).
    """
    deadline = time.monotonic() + timeout
    while True:
        response = client.get(f"/api/v1/runs/{run_id}")
        assert response.status_code == 200, response.text
        body = response.json()
        if body["status"] in TERMINAL_STATUSES:
            client.app.state.ingest.wait_idle(timeout=max(0.1, deadline - time.monotonic()))
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} still {body['status']!r} after {timeout} s")
        time.sleep(0.01)


# ===========================================================================
# 4. Spreading the suite over pytest-xdist workers (`make test` runs `-n`)
# ===========================================================================
#
# tests/support/distribute.py says what travels together; under `-n` the default
# per-test distribution would split modules that share state.


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getoption("dist") in ("no", "each"):
        return None
    from tests.support.distribute import ModuleScheduling

    return ModuleScheduling(config, log)


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by parametrized session fixtures
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from tests.support.distribute import long_units_first, unique_nodeids

    unique_nodeids(items)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker: the order it reports is the order units are handed out
        items[:] = long_units_first(items)


KERNELS_READY = "FP8_POLICY_TEST_KERNELS_READY"  # a file the controller writes once the numba cache is complete


def pytest_sessionstart(session: pytest.Session) -> None:
    """Every test runs with numba's on-disk cache complete (policy/parse/kernels.py, service/ingest/kernel_warmup.py).

    On a clean checkout (CI) the cache is empty, and each xdist worker's first app compiled the kernels in its
    warm-up thread while the controller did the same: three compiles on two cores, 60-100 s, during which an
    ingest job over `kernels.SMALL_UPLOAD_BYTES` waits for them and outlived its test's 30 s wait (two CI runs
    failed so: a run still 'processing', ingest still busy). So, when the cache is incomplete, the controller
    compiles it once in a child process (`python -m fp8_policy.service.ingest.kernel_warmup`) while the workers
    start and collect, and each worker waits for it before its first test (`pytest_runtestloop`); without
    `-n` the session compiles it here. Workers and the servers tests start then only load the cached code."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    from fp8_policy.service.ingest.kernel_warmup import cache_complete

    if cache_complete():
        return
    if not session.config.getoption("numprocesses", None):
        from fp8_policy.service.ingest.kernel_warmup import warm_parser

        warm_parser()
        return
    import subprocess
    import sys
    import tempfile
    import threading

    ready = Path(tempfile.mkdtemp(prefix="fp8-kernels-")) / "done"
    os.environ[KERNELS_READY] = str(ready)  # inherited by the workers xdist spawns after this hook
    child = subprocess.Popen(
        [sys.executable, "-m", "fp8_policy.service.ingest.kernel_warmup"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )

    def wait_and_tell() -> None:
        _, errors = child.communicate()
        if child.returncode != 0:  # the workers then compile in-process as before; say why once
            print(f"compiling the numba kernels failed ({child.returncode}): {errors[-2000:]}", file=sys.stderr)
        ready.write_text(str(child.returncode))

    threading.Thread(target=wait_and_tell, name="numba-cache", daemon=True).start()


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """An xdist worker waits for the controller's compile of the numba cache (pytest_sessionstart) once."""
    flag = os.environ.get(KERNELS_READY)
    if not flag or not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    deadline = time.monotonic() + 900
    while not Path(flag).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
