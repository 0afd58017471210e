"""Engines and the unit of work: `session_scope` is the only place in the code base that commits."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from sqlalchemy import CursorResult, Engine, Result, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.orm import Session, sessionmaker


class Repository:
    """The queries of one table group, run in the caller's session: a repository never commits (the
    `session_scope` that opened the session does)."""

    def __init__(self, session: Session) -> None:
        self.session = session


def create_db_engine(url: str, pool: Mapping[str, float] | None = None) -> Engine:
    """An engine for `url`; SQLite gets WAL, foreign keys and a busy timeout for the ingest worker.

    `pool`: QueuePool options (`pool_size`, `max_overflow`, `pool_timeout`; see
    https://docs.sqlalchemy.org/en/20/core/pooling.html#sqlalchemy.pool.QueuePool). An in-memory SQLite
    database keeps SQLAlchemy's single-connection pool and ignores them.
    """
    parsed = make_url(url)
    options = dict(pool or {})
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        else:
            options = {}
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False}, **options)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True, **options)


def is_in_memory(engine: Engine) -> bool:
    """An in-memory SQLite database: it exists once per engine (a second engine would see another one)."""
    return engine.url.get_backend_name() == "sqlite" and engine.url.database in (None, "", ":memory:")


def _sqlite_pragmas(dbapi_connection: DBAPIConnection, _record: object) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def create_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One unit of work: commit on success, roll back on any error."""
    with factory() as session:
        try:
            yield session
        except BaseException:
            session.rollback()
            raise
        else:
            session.commit()


def rows_affected(result: Result[Any]) -> int:
    """How many rows an UPDATE or DELETE matched: `Session.execute` is typed to return a `Result`, but a DML
    statement's result is a `CursorResult`, which carries `rowcount`."""
    return int(cast(CursorResult[Any], result).rowcount)
