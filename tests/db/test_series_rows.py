"""Series rows (db/series_rows.py): every value round-trips on both backends whatever the statement size; on
SQLite a rank's rows go in as a few multi-row INSERTs, never one step per row, and they are encoded before the
transaction that stores them takes the write lock (issue 20: uploads waited behind a rank's store)."""

from __future__ import annotations

import dataclasses
import math
import sqlite3
from collections.abc import Iterator

import numpy as np
import pytest
from sqlalchemy import Engine, event, select
from sqlalchemy.orm import Session, sessionmaker

from fp8_policy.db import series_rows
from fp8_policy.db.rank_store import RankStore
from fp8_policy.db.run_models import Layer, Series
from fp8_policy.db.series_rows import COLUMNS, encode_series, insert_series, rows_per_statement
from fp8_policy.db.session import create_session_factory, session_scope
from fp8_policy.policy.parse.assemble import AssembledRun, SeriesRecord
from tests.db.test_repositories import esm2_assembled, new_run, same_values

RANKS = 17  # 72 ESM-2 series per rank: 1224 rows, more than one statement's worth


@pytest.fixture(scope="module")
def assembled() -> AssembledRun:
    return esm2_assembled()


@pytest.fixture
def factory(db_engine: Engine) -> sessionmaker[Session]:
    return create_session_factory(db_engine)


def many_ranks(assembled: AssembledRun) -> list[SeriesRecord]:
    return [dataclasses.replace(s, rank=r) for r in range(RANKS) for s in assembled.series]


@pytest.fixture
def statements(db_engine: Engine) -> Iterator[list[tuple[str, bool]]]:
    """(statement, executemany) of every series INSERT the engine sends."""
    seen: list[tuple[str, bool]] = []

    def record(_conn, _cursor, statement: str, _params, _context, executemany: bool) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO SERIES"):
            seen.append((statement, executemany))

    event.listen(db_engine, "before_cursor_execute", record)
    yield seen
    event.remove(db_engine, "before_cursor_execute", record)


def store_rows(factory: sessionmaker[Session], project: str, records: list[SeriesRecord], limit: int | None) -> int:
    run_id = new_run(factory, project)
    encoded = encode_series(records)
    with session_scope(factory) as session:
        dbapi = session.connection().connection.dbapi_connection
        if limit is not None:  # an older SQLite's variable limit, on this (pooled) connection until the end
            limit = dbapi.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, limit)
        try:
            layer_ids = RankStore(session).ensure_layers(run_id, {e.layer for e in encoded})
            insert_series(session, run_id, encoded, layer_ids)
        finally:
            if limit is not None:
                dbapi.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, limit)
    return run_id


SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


class TestRoundTrip:
    def test_every_row_and_value_comes_back(self, factory, project: str, assembled: AssembledRun) -> None:
        assert_round_trip(factory, project, assembled, limit=None)

    @SQLITE_ONLY
    def test_with_an_older_sqlites_variable_limit(self, factory, project: str, assembled: AssembledRun) -> None:
        assert_round_trip(factory, project, assembled, limit=999)


def assert_round_trip(factory: sessionmaker[Session], project: str, assembled: AssembledRun, limit: int | None) -> None:
    records = many_ranks(assembled)
    run_id = store_rows(factory, project, records, limit)
    with session_scope(factory) as session:
        rows = session.execute(select(Series, Layer.name).join(Layer).where(Series.run_id == run_id)).all()
        by_key = {(s.rank, s.tensor, s.stat_key, layer): s for s, layer in rows}
        assert len(rows) == len(records) == len(by_key)
        for record in records:
            row = by_key[(record.rank, record.metric.tensor, record.metric.stat_key, record.metric.layer)]
            assert (row.count, row.nan_count, row.recipe, row.columnwise) == (
                record.summary.count,
                record.summary.nan_count,
                record.metric.recipe,
                record.metric.columnwise,
            )
            for column in ("min", "max", "mean", "p95", "last"):
                want, got = getattr(record.summary, column), getattr(row, column)
                assert (
                    (want is None and got is None) or math.isclose(want, got) or (math.isnan(want) and math.isnan(got))
                )
            decoded = series_rows.codec.decode_values(row.values)
            assert same_values(decoded, np.asarray(record.values, dtype=np.float64))
            assert np.array_equal(series_rows.codec.decode_iterations(row.iterations), record.iterations)


@SQLITE_ONLY
class TestFewStatementsOnSqlite:
    """PostgreSQL keeps SQLAlchemy's executemany: it locks rows, there is no database-wide write lock."""

    @pytest.mark.parametrize("limit", [None, 999], ids=["library limit", "SQLite before 3.32"])
    def test_a_rank_is_a_few_multi_row_inserts(
        self, factory, project: str, assembled: AssembledRun, statements, limit: int | None
    ) -> None:
        records = many_ranks(assembled)
        store_rows(factory, project, records, limit)
        per_statement = 999 // len(COLUMNS) if limit else series_rows.MAX_ROWS_PER_STATEMENT
        assert [many for _s, many in statements] == [False] * math.ceil(len(records) / per_statement)


def test_rows_per_statement_follows_the_variable_limit() -> None:
    connection = sqlite3.connect(":memory:")
    connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
    assert rows_per_statement(connection) == 999 // len(COLUMNS)
    connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 10)
    assert rows_per_statement(connection) == 1
    assert rows_per_statement(object()) == 999 // len(COLUMNS)
