"""The Alembic migrations on SQLite and PostgreSQL: models and migrations agree (drift test, house-style §7.9),
and upgrade -> downgrade base -> upgrade works on a fresh database.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Column, Engine, Integer, MetaData, String, inspect, text

from fp8_policy.db.base import Base
from fp8_policy.db.migrate import alembic_config, at_head, downgrade, script_head, upgrade

TABLES = {
    "runs",
    "run_tags",
    "layers",
    "series",
    "api_tokens",
    "service_secrets",
    "ingest_jobs",
    "run_summaries",
    "live_files",
    "live_state",
    "live_events",
    "alert_rules",
    "alert_deliveries",
    "experiments",
    "run_configs",
}


def drift(engine: Engine, metadata: MetaData) -> list:
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return compare_metadata(context, metadata)


def head_revision() -> str:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def test_models_match_migrations(db_engine: Engine) -> None:
    assert drift(db_engine, Base.metadata) == [], "models and alembic/versions disagree: write (or fix) a migration"


def copy_of_models() -> MetaData:
    copy = MetaData(naming_convention=Base.metadata.naming_convention)
    for table in Base.metadata.sorted_tables:
        table.to_metadata(copy)
    return copy


def test_drift_test_notices_a_changed_column_length(db_engine: Engine) -> None:
    changed = copy_of_models()
    changed.tables["runs"].c["name"].type = String(300)

    diffs = drift(db_engine, changed)

    assert [(d[0][0], d[0][3], d[0][5].length, d[0][6].length) for d in diffs] == [("modify_type", "name", 200, 300)]


def test_drift_test_notices_a_new_column(db_engine: Engine) -> None:
    changed = copy_of_models()
    changed.tables["layers"].append_column(Column("extra", Integer, nullable=True))

    diffs = drift(db_engine, changed)

    assert [(d[0], d[2], d[3].name) for d in diffs] == [("add_column", "layers", "extra")]


def test_migrated_database_is_at_head(db_engine: Engine) -> None:
    assert current_revision(db_engine) == head_revision()
    assert set(inspect(db_engine).get_table_names()) >= TABLES


def test_upgrade_downgrade_base_upgrade(fresh_url: str, fresh_engine: Engine) -> None:
    upgrade(fresh_url)
    assert set(inspect(fresh_engine).get_table_names()) == TABLES | {"alembic_version"}
    assert current_revision(fresh_engine) == head_revision()

    downgrade(fresh_url, "base")
    assert set(inspect(fresh_engine).get_table_names()) == {"alembic_version"}
    assert current_revision(fresh_engine) is None

    upgrade(fresh_url)
    assert set(inspect(fresh_engine).get_table_names()) == TABLES | {"alembic_version"}
    assert current_revision(fresh_engine) == head_revision()
    assert drift(fresh_engine, Base.metadata) == []


def test_upgrade_twice_is_a_no_op(fresh_url: str, fresh_engine: Engine) -> None:
    upgrade(fresh_url)
    with fresh_engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO runs (project, status, sha256, upload_bytes, upload_path, metadata, created_at, rank_count,"
                " layer_count, series_count, point_count, lines_read, lines_skipped, lines_blank, lines_duplicated)"
                " VALUES ('p', 'queued', 'x', 1, '', '{}', CURRENT_TIMESTAMP, 0, 0, 0, 0, 0, 0, 0, 0)"
            )
        )

    upgrade(fresh_url)

    with fresh_engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM runs")).scalar_one() == 1
    assert current_revision(fresh_engine) == head_revision()


# --- the upgrade's at-head check (db/migrate.py: no Alembic import when there is nothing to do) ---------------
def test_script_head_reads_the_head_alembic_finds() -> None:
    assert script_head() == head_revision()


def test_at_head_only_at_the_head(fresh_url: str, fresh_engine: Engine) -> None:
    assert not at_head(fresh_url)  # empty: no version table
    upgrade(fresh_url)
    assert at_head(fresh_url)
    downgrade(fresh_url, "-1")
    assert not at_head(fresh_url)
    upgrade(fresh_url)  # the check must not take "one behind" for "at head"
    assert current_revision(fresh_engine) == head_revision()
    assert drift(fresh_engine, Base.metadata) == []


def _versions(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "versions").mkdir(parents=True)
    for name, source in files.items():
        (tmp_path / "versions" / name).write_text(source)
    return tmp_path


def test_script_head_gives_no_answer_where_alembic_must_decide(tmp_path: Path) -> None:
    chain = {"a.py": 'revision = "a"\ndown_revision = None\n', "b.py": 'revision: str = "b"\ndown_revision = "a"\n'}
    assert script_head(_versions(tmp_path / "chain", chain)) == "b"
    two_heads = {**chain, "c.py": 'revision = "c"\ndown_revision = "a"\n'}
    assert script_head(_versions(tmp_path / "two", two_heads)) is None
    merge = {**two_heads, "d.py": 'revision = "d"\ndown_revision = ("b", "c")\n'}
    assert script_head(_versions(tmp_path / "merge", merge)) is None
    missing_parent = {"b.py": 'revision = "b"\ndown_revision = "a"\n'}
    assert script_head(_versions(tmp_path / "missing", missing_parent)) is None


def test_an_upgrade_at_head_does_not_import_alembic(fresh_url: str) -> None:
    upgrade(fresh_url)
    probe = (
        "import sys; from fp8_policy.db.migrate import upgrade; "
        f"upgrade({fresh_url!r}); print('alembic' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
