"""Series rows: encoded before a write transaction begins, inserted in as few statements as the database allows.

Why both halves matter on SQLite, the embedded default: a write transaction holds the database's only write lock
from its first write to its commit, so an upload's INSERT of its run row waits for whatever an ingest job does in
between. CPython's sqlite3 module releases the GIL around every statement's prepare and step
(Modules/_sqlite/cursor.c, `Py_BEGIN_ALLOW_THREADS`), and under load (30 request threads) re-taking it waits
behind the other threads: the "convoy effect" of https://github.com/python/cpython/issues/52194. One
`executemany` of 600 rows is 600 steps; under `make bench`'s mixed load storing one rank held the write lock for
0.7-1.6 s, and uploads waited that long for their run row (issue 20, upload p99 > 2 s). Encoding outside the
transaction and one multi-row INSERT per `rows_per_statement` rows keep the lock for a handful of steps.
PostgreSQL locks rows, not the database; it takes the rows in one COPY (psycopg 3), else SQLAlchemy's executemany.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import BigInteger, Boolean, Float, Integer, LargeBinary, String, Table, insert
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from fp8_policy._lazy import lazy_module
from fp8_policy.db.run_models import Series

if TYPE_CHECKING:
    from fp8_policy.db import codec
    from fp8_policy.policy.parse.assemble import SeriesRecord
else:  # imported on first use (numpy, isal): start-up path, tests/service/app/test_start_up_imports.py
    codec = lazy_module("fp8_policy.db.codec")

SERIES_TABLE = cast(Table, Series.__table__)
# every column a series row sets, in statement order; `id` is the database's
COLUMNS = tuple(c.name for c in SERIES_TABLE.columns if c.name != "id")
_KEYED = COLUMNS[2:]  # after run_id, layer_id: what encode_series computes
MAX_ROWS_PER_STATEMENT = 1000  # bounds one statement's size (the rows carry their encoded series)


@dataclass(frozen=True)
class EncodedSeries:
    """One series, ready to insert once its run and layer ids are known."""

    layer: str
    values: tuple[Any, ...]  # in the order of COLUMNS[2:]


def encode_series(records: list[SeriesRecord], rename: Callable[[str], str] | None = None) -> list[EncodedSeries]:
    """The rows of `records`, encoded (codec) outside any transaction; `rename` gives each layer the name it is
    stored under (a parallel job's rank: its logged names -> global ones, policy/parallel/naming.py). Series
    of a rank mostly share their iterations (every series logged at every iteration): a short iteration array is
    encoded once per call (a parallel job's ranks store many series of ten points: 24,576 rows for 1,024 ranks)."""
    cache: dict[bytes, bytes] = {}
    out = []
    for record in records:
        layer = record.metric.layer if rename is None else rename(record.metric.layer)
        out.append(EncodedSeries(layer, _values(record, _iterations(record.iterations, cache))))
    return out


_SHORT_SERIES = 1024  # points whose iteration array is looked up in the call's cache before it is encoded


def _iterations(iterations: Any, cache: dict[bytes, bytes]) -> bytes:
    if iterations.shape[0] > _SHORT_SERIES:
        return codec.encode_iterations(iterations)
    key = iterations.tobytes()
    found = cache.get(key)
    if found is None:
        found = cache[key] = codec.encode_iterations(iterations)
    return found


# The row's columns after run_id and layer_id, in the order _values builds them (checked against the table).
_VALUE_COLUMNS = (
    "rank",
    "tensor",
    "stat_key",
    "stat",
    "recipe",
    "columnwise",
    "count",
    "nan_count",
    "posinf_count",
    "neginf_count",
    "min",
    "max",
    "mean",
    "p95",
    "last",
    "last_nonfinite",
    "first_iteration",
    "last_iteration",
    "iterations",
    "values",
)
if _VALUE_COLUMNS != _KEYED:  # a column added to the table must be added here too
    raise ImportError(f"db/series_rows.py: the series table's columns {_KEYED} are not {_VALUE_COLUMNS}")


def _values(record: SeriesRecord, iterations: bytes) -> tuple[Any, ...]:
    s, m = record.summary, record.metric
    return (
        record.rank,
        m.tensor,
        m.stat_key,
        m.stat,
        m.recipe,
        m.columnwise,
        s.count,
        s.nan_count,
        s.posinf_count,
        s.neginf_count,
        s.min,
        s.max,
        s.mean,
        s.p95,
        s.last,
        s.last_nonfinite,
        s.first_iteration,
        s.last_iteration,
        iterations,
        codec.encode_values(record.values),
    )


def insert_series(session: Session, run_id: int, encoded: list[EncodedSeries], layer_ids: dict[str, int]) -> None:
    """Insert `encoded` for `run_id` (the caller's transaction); `layer_ids` maps each layer name to its row."""
    rows = [(run_id, layer_ids[e.layer], *e.values) for e in encoded]
    if not rows:
        return
    if session.get_bind().dialect.name != "sqlite":
        dbapi = session.connection().connection.dbapi_connection
        if _copy_rows(dbapi, rows):
            return
        for start in range(0, len(rows), 500):  # Core executemany: complete rows, no ORM bookkeeping
            session.execute(
                insert(SERIES_TABLE), [dict(zip(COLUMNS, row, strict=True)) for row in rows[start : start + 500]]
            )
        return
    connection = session.connection()
    per_statement = rows_per_statement(connection.connection.dbapi_connection)
    one_row = "(" + ", ".join("?" * len(COLUMNS)) + ")"
    quoted = ", ".join(f'"{name}"' for name in COLUMNS)
    for start in range(0, len(rows), per_statement):
        chunk = rows[start : start + per_statement]
        statement = f"INSERT INTO {SERIES_TABLE.name} ({quoted}) VALUES " + ", ".join([one_row] * len(chunk))
        connection.exec_driver_sql(statement, tuple(value for row in chunk for value in row))


def _copy_rows(dbapi_connection: Any, rows: list[tuple[Any, ...]]) -> bool:
    """PostgreSQL through psycopg 3: the rows in one `COPY ... FROM STDIN`, in the caller's transaction (the same
    connection). executemany took 4.2 s for the 24,576 short series of a 1,024-rank job (SQLAlchemy's per-row
    parameter processing), COPY a fraction of it (https://www.psycopg.org/psycopg3/docs/basic/copy.html).
    False when the driver has no COPY (another DB-API driver): the caller inserts another way."""
    cursor_of = getattr(dbapi_connection, "cursor", None)
    if cursor_of is None or not hasattr(type(dbapi_connection), "pipeline"):  # psycopg 3's Connection has both
        return False
    quoted = ", ".join(f'"{name}"' for name in COLUMNS)
    statement = f"COPY {SERIES_TABLE.name} ({quoted}) FROM STDIN (FORMAT BINARY)"
    driver = sys.modules[type(dbapi_connection).__module__.split(".")[0]]
    try:
        with cursor_of() as cursor, cursor.copy(statement) as copy:
            copy.set_types(_COPY_TYPES)
            for row in rows:
                copy.write_row(row)
    except driver.Error as exc:  # as SQLAlchemy raises the driver's errors: IntegrityError, OperationalError, ...
        raise DBAPIError.instance(statement, None, exc, driver.Error) from exc
    return True


# The PostgreSQL type a binary COPY sends a series column as (its binary format is the column's), by the column's
# SQLAlchemy type; checked in order, so BigInteger matches before Integer (its base class).
_COPY_TYPE_OF = (
    (BigInteger, "int8"),
    (Integer, "int4"),
    (Boolean, "bool"),
    (Float, "float8"),
    (LargeBinary, "bytea"),
    (String, "text"),
)


def _copy_type(column: Any) -> str:
    """The PostgreSQL type a binary COPY sends a series column as (`_COPY_TYPE_OF`)."""
    kind = type(column.type)
    for sql_type, copy_type in _COPY_TYPE_OF:
        if issubclass(kind, sql_type):
            return copy_type
    raise TypeError(f"series column {column.name}: no COPY type for {kind.__name__}")


_COPY_TYPES = [_copy_type(SERIES_TABLE.columns[name]) for name in COLUMNS]


def rows_per_statement(dbapi_connection: Any) -> int:
    """Series rows one SQLite INSERT can bind: the library's variable limit (999 before SQLite 3.32, 32766 or
    more since; https://www.sqlite.org/limits.html#max_variable_number), at most MAX_ROWS_PER_STATEMENT."""
    try:
        limit = int(dbapi_connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))
    except (AttributeError, sqlite3.Error):  # not a sqlite3 connection: the lowest limit any SQLite has had
        limit = 999
    return max(1, min(limit // len(COLUMNS), MAX_ROWS_PER_STATEMENT))
