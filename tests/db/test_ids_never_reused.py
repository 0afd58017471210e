"""Ids that name something outside their row (a run's storage folder and caches, an event kept by an alert
delivery, a job a worker holds, a rule an admin removes) are never handed out twice, on SQLite and PostgreSQL,
also after a downgrade that rebuilt `runs` (migration ids_never_reused, alembic/versions/)."""

from __future__ import annotations

import re
import sqlite3
import uuid
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, create_engine, text

from fp8_policy.db.base import Base
from fp8_policy.db.migrate import downgrade, upgrade

# run_configs: a kept config's id is in its download path, which an experiment tracker may keep (migration
# run_facets_configs, after ids_never_reused)
NEVER_REUSED = ("runs", "live_events", "ingest_jobs", "alert_rules", "run_configs")


def add_run(connection: Connection, project: str) -> int:
    return connection.execute(
        text(
            "INSERT INTO runs (project, status, sha256, upload_bytes, upload_path, metadata, created_at, rank_count,"
            " layer_count, series_count, point_count, lines_read, lines_skipped, lines_blank, lines_duplicated)"
            " VALUES (:project, 'queued', :sha, 1, '', '{}', CURRENT_TIMESTAMP, 0, 0, 0, 0, 0, 0, 0, 0) RETURNING id"
        ),
        {"project": project, "sha": uuid.uuid4().hex},
    ).scalar_one()


def add_row(connection: Connection, table: str, project: str, run_id: int) -> int:
    """A new row of `table` (its run is `run_id`, for the tables that have one); its id."""
    if table == "runs":
        return add_run(connection, project)
    statements = {
        "live_events": "INSERT INTO live_events (run_id, kind, severity, layer, tensor, stat, rank, iteration, value,"
        " message, detail, created_at) VALUES (:run, 'nan', 'critical', 'l', 't', 's', 0, 1, NULL, 'm', '{}',"
        " CURRENT_TIMESTAMP) RETURNING id",
        "ingest_jobs": "INSERT INTO ingest_jobs (run_id, kind, rank, status, attempts, created_at) VALUES"
        " (:run, 'rank', (SELECT count(*) FROM ingest_jobs), 'queued', 0, CURRENT_TIMESTAMP) RETURNING id",
        "alert_rules": "INSERT INTO alert_rules (project, webhook_url, format, events, min_severity, cooldown_seconds,"
        " created_at) VALUES (:project, 'https://example.com/hook', 'json', '[]', 'warning', 0, CURRENT_TIMESTAMP)"
        " RETURNING id",
        "run_configs": "INSERT INTO run_configs (run_id, format, version, filename, media_type, content, sha256, size,"
        " policy_version, options, recommendation_sha256, created_at) VALUES (:run, 'json',"
        " (SELECT count(*) + 1 FROM run_configs), 'p.json', 'application/json', '{}', 'x', 2, 'v', '{}', 'y',"
        " CURRENT_TIMESTAMP) RETURNING id",
    }
    return connection.execute(text(statements[table]), {"run": run_id, "project": project}).scalar_one()


def newest_deleted_then_added(engine: Engine, table: str, project: str) -> tuple[list[int], int]:
    """Three rows of `table`, the newest deleted (in its own transaction), then one more: (the three ids, the new)."""
    with engine.begin() as connection:
        run_id = add_run(connection, f"{project}-owner")
        ids = [add_row(connection, table, project, run_id) for _ in range(3)]
    with engine.begin() as connection:
        connection.execute(text(f"DELETE FROM {table} WHERE id = :id"), {"id": ids[-1]})
    with engine.begin() as connection:
        return ids, add_row(connection, table, project, run_id)


@pytest.mark.parametrize("table", NEVER_REUSED)
def test_the_newest_deleted_id_is_not_handed_out_again(db_engine: Engine, project: str, table: str) -> None:
    ids, added = newest_deleted_then_added(db_engine, table, project)

    assert added > ids[-1], f"{table}: id {ids[-1]} was deleted and handed out again"


def test_run_ids_1_to_3_delete_3_next_is_4_after_a_downgrade_rebuilt_runs(fresh_url: str, fresh_engine: Engine) -> None:
    """run_notes' downgrade rebuilds `runs` in batch mode, which drops AUTOINCREMENT; the upgrade puts it back, and
    the rebuild keeps the runs' tags (with foreign keys on, dropping `runs` deleted them: alembic/env.py)."""
    upgrade(fresh_url)
    with fresh_engine.begin() as connection:
        ids = [add_run(connection, "p") for _ in range(3)]
        connection.execute(text("INSERT INTO run_tags (run_id, tag) VALUES (:id, 'kept')"), {"id": ids[0]})
    assert ids == [1, 2, 3]

    downgrade(fresh_url, "alerts")
    upgrade(fresh_url)
    with fresh_engine.begin() as connection:
        connection.execute(text("DELETE FROM runs WHERE id = 3"))
    with fresh_engine.begin() as connection:
        assert add_run(connection, "p") == 4
        assert connection.execute(text("SELECT run_id, tag FROM run_tags")).all() == [(1, "kept")]


def autoincrement_tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as connection:
        rows = connection.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
    return {name for name, sql in rows if re.search(r"\bAUTOINCREMENT\b", sql or "", re.IGNORECASE)}


def test_models_declare_the_autoincrement_the_migrations_build(tmp_path: Path) -> None:
    """The drift test (test_migrations.py) does not compare table options: a create_all database and a migrated
    one must agree on which tables never reuse an id."""
    upgrade(f"sqlite+pysqlite:///{tmp_path / 'migrated.db'}")
    engine = create_engine(f"sqlite+pysqlite:///{tmp_path / 'created.db'}")
    Base.metadata.create_all(engine)
    engine.dispose()

    assert autoincrement_tables(tmp_path / "migrated.db") == set(NEVER_REUSED)
    assert autoincrement_tables(tmp_path / "created.db") == set(NEVER_REUSED)


def shape(path: Path) -> dict[str, object]:
    """Every index's SQL, and per table its foreign keys, unique constraints (as autoindexes) and columns."""
    with sqlite3.connect(path) as connection:
        tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {
            "indexes": set(connection.execute("SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index'")),
            "foreign_keys": {t: connection.execute(f"PRAGMA foreign_key_list('{t}')").fetchall() for t in tables},
            "columns": {t: connection.execute(f"PRAGMA table_info('{t}')").fetchall() for t in tables},
        }


def test_the_rebuild_keeps_every_index_foreign_key_constraint_and_column(tmp_path: Path) -> None:
    url = f"sqlite+pysqlite:///{tmp_path / 'rebuilt.db'}"
    upgrade(url, "summary_recommendation")
    before = shape(tmp_path / "rebuilt.db")

    upgrade(url, "ids_never_reused")  # not head: later migrations change the shape on purpose

    assert autoincrement_tables(tmp_path / "rebuilt.db") == set(NEVER_REUSED) - {"run_configs"}
    assert shape(tmp_path / "rebuilt.db") == before
