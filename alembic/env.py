"""Alembic environment: the URL comes from config.attributes (db/migrate.py) or the service settings."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context

from fp8_policy.db import run_models  # noqa: F401  (registers every table on Base.metadata)
from fp8_policy.db.base import Base
from fp8_policy.db.session import create_db_engine

config = context.config
if config.config_file_name and not config.attributes.get("database_url"):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _url() -> str:
    url = config.attributes.get("database_url")
    if url:
        return url
    from fp8_policy.service.settings import get_settings

    return get_settings().resolved_database_url


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=Base.metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """On SQLite the migrations run with foreign keys off and are checked before the commit: a batch operation
    rebuilds a table (new table, copy, DROP, rename), and with foreign keys on, dropping `runs` deletes every row
    of the tables that cascade from it (https://www.sqlite.org/lang_altertable.html#otheralter, steps 1 and 10;
    https://www.sqlite.org/foreignkeys.html#fk_schemacommands). The pragma is a no-op inside a transaction, so
    it is set before the migrations' transaction begins."""
    engine = create_db_engine(_url())
    with engine.connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
            connection.commit()
        context.configure(
            connection=connection,
            target_metadata=Base.metadata,
            render_as_batch=sqlite,
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
            if sqlite:
                broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                if broken:
                    raise RuntimeError(f"the migrations left rows whose foreign keys name no row: {broken[:5]}")
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
