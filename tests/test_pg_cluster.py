"""The throwaway PostgreSQL cluster and the database_url fixture really work."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.support.pg_cluster import ThrowawayPostgres
from tests.support.pg_processes import PostgresStartupError, PostgresUnavailable, _pid_alive, port_is_open

REPO_ROOT = Path(__file__).resolve().parent.parent


def _roundtrip(url: str, table: str = "items", drop: bool = False) -> list[tuple[int, str]]:
    engine = sa.create_engine(url)
    try:
        meta = sa.MetaData()
        t = sa.Table(
            table,
            meta,
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("name", sa.String(50), nullable=False),
        )
        meta.create_all(engine)
        with engine.begin() as conn:
            conn.execute(t.insert(), [{"id": 1, "name": "bf16"}, {"id": 2, "name": "fp8-é"}])
        with engine.connect() as conn:
            rows = [tuple(r) for r in conn.execute(sa.select(t.c.id, t.c.name).order_by(t.c.id))]
        if drop:
            meta.drop_all(engine)
        return rows
    finally:
        engine.dispose()


def _wait_until(pred, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


# --------------------------------------------------------------------------
# session cluster
# --------------------------------------------------------------------------


@pytest.mark.postgres
def test_url_shape(postgres_server):
    assert postgres_server.url == (
        f"postgresql+psycopg://postgres@127.0.0.1:{postgres_server.port}/{postgres_server.dbname}"
    )
    assert port_is_open(postgres_server.port)
    assert postgres_server.startup_seconds is not None and postgres_server.startup_seconds < 30


@pytest.mark.postgres
def test_table_roundtrip_and_version(postgres_server):
    assert _roundtrip(postgres_server.url) == [(1, "bf16"), (2, "fp8-é")]
    engine = sa.create_engine(postgres_server.url)
    try:
        with engine.connect() as conn:
            version = conn.execute(sa.text("select version()")).scalar_one()
            encoding = conn.execute(sa.text("show server_encoding")).scalar_one()
            listen = conn.execute(sa.text("show listen_addresses")).scalar_one()
            fsync = conn.execute(sa.text("show fsync")).scalar_one()
    finally:
        engine.dispose()
    assert version.startswith("PostgreSQL 15"), version
    assert encoding == "UTF8"
    assert listen == "127.0.0.1"
    assert fsync == "off"


@pytest.mark.postgres
def test_create_database_is_isolated(postgres_server):
    url_a = postgres_server.create_database()
    url_b = postgres_server.create_database("isolation_b")
    assert url_a != url_b and url_b.endswith("/isolation_b")
    ea, eb = sa.create_engine(url_a), sa.create_engine(url_b)
    try:
        with ea.begin() as conn:
            conn.execute(sa.text("create table only_in_a (x int)"))
            conn.execute(sa.text("insert into only_in_a values (42)"))
        with eb.begin() as conn:
            conn.execute(sa.text("create table only_in_b (y int)"))
        assert sa.inspect(ea).get_table_names() == ["only_in_a"]
        assert sa.inspect(eb).get_table_names() == ["only_in_b"]
        with ea.connect() as conn:
            assert conn.execute(sa.text("select x from only_in_a")).scalar_one() == 42
    finally:
        ea.dispose()
        eb.dispose()
    with pytest.raises(Exception, match="already exists"):
        postgres_server.create_database("isolation_b")
    with pytest.raises(ValueError):
        postgres_server.create_database('bad"; drop database postgres; --')


# --------------------------------------------------------------------------
# a second, short-lived cluster: lifecycle and cleanup
# --------------------------------------------------------------------------


@pytest.mark.postgres
def test_context_manager_cleans_up(postgres_server):
    # postgres_server is requested only for the skip/fail policy of conftest.
    with ThrowawayPostgres(dbname="short_lived") as pg:
        port, base_dir = pg.port, pg.base_dir
        assert port != postgres_server.port
        assert base_dir.is_dir() and (base_dir / "data" / "PG_VERSION").is_file()
        assert _roundtrip(pg.url) == [(1, "bf16"), (2, "fp8-é")]
        pid = int((base_dir / "data" / "postmaster.pid").read_text().split()[0])
    assert not port_is_open(port)
    assert not base_dir.exists()
    assert not pg.running
    assert _wait_until(lambda: not _pid_alive(pid), timeout=5)
    pg.close()  # idempotent


@pytest.mark.postgres
def test_startup_error_has_log_tail_and_cleans_up(postgres_server):
    # A private base directory: under pytest-xdist another worker may start its own cluster in /tmp meanwhile.
    # Short (the Unix socket path limit) and traversable by the postgres OS user, like /tmp itself.
    base = Path(tempfile.mkdtemp(prefix="fp8-pgt-", dir="/tmp" if os.path.isdir("/tmp") else None))
    base.chmod(0o755)
    try:
        pg = ThrowawayPostgres(server_settings={"shared_buffers": "not-a-size"}, base_tmp=base)
        with pytest.raises(PostgresStartupError) as info:
            pg.start()
        msg = str(info.value)
        assert "server log tail" in msg
        assert "shared_buffers" in msg  # the server's own complaint, from the log
        assert not pg.running
        assert list(base.iterdir()) == []  # the cluster directory it made is gone again
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_missing_binaries_raise_clear_error(tmp_path):
    with pytest.raises(PostgresUnavailable, match="FP8_POLICY_SKIP_POSTGRES"):
        ThrowawayPostgres(bindir=tmp_path).start()


_CHILD = """
import json, signal, sys, time
from tests.support.pg_cluster import ThrowawayPostgres
# Ctrl-C raises KeyboardInterrupt here even when the suite was started with SIGINT ignored (a background job of a
# non-interactive shell), which the child would inherit: https://docs.python.org/3/library/signal.html
signal.signal(signal.SIGINT, signal.default_int_handler)
pg = ThrowawayPostgres().start()
pid = int((pg.datadir / "postmaster.pid").read_text().split()[0])
print(json.dumps({"port": pg.port, "dir": str(pg.base_dir), "pid": pid}), flush=True)
if sys.argv[1] == "exit":
    sys.stdin.readline()  # the parent has seen the server answer
    sys.exit(0)           # no close(): atexit must clean up
time.sleep(120)           # wait to be signalled
"""


@pytest.mark.postgres
@pytest.mark.parametrize("how", ["exit", "sigint", "sigterm", "sigkill"])
def test_cleanup_when_session_dies(postgres_server, how):
    """An interrupted/killed test process must not leave a server or directory behind."""
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, how],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,  # "exit" waits for a line: its atexit clean-up must not race the check below
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = child.stdout.readline()
        assert line, child.stderr.read()
        info = json.loads(line)
        assert port_is_open(info["port"])
        if how == "exit":
            child.stdin.write("checked\n")
            child.stdin.flush()
        else:
            child.send_signal({"sigint": signal.SIGINT, "sigterm": signal.SIGTERM, "sigkill": signal.SIGKILL}[how])
        child.wait(timeout=30)
    finally:
        child.stdin.close()
        if child.poll() is None:
            child.kill()
            child.wait()
    assert _wait_until(lambda: not port_is_open(info["port"]))
    assert _wait_until(lambda: not Path(info["dir"]).exists())
    assert _wait_until(lambda: not _pid_alive(info["pid"]))


# --------------------------------------------------------------------------
# the database_url fixture
# --------------------------------------------------------------------------


def test_database_url_gives_working_engine(database_url, request):
    # database_url is session-scoped and shared with the app tests: leave it as found.
    backend = request.node.callspec.params["database_url"]
    engine = sa.create_engine(database_url)
    try:
        assert engine.dialect.name == backend
        tables_before = set(sa.inspect(engine).get_table_names())
        assert _roundtrip(database_url, "pg_cluster_probe", drop=True) == [(1, "bf16"), (2, "fp8-é")]
        assert set(sa.inspect(engine).get_table_names()) == tables_before
    finally:
        engine.dispose()
