"""Alembic environment: the URL comes from config.attributes (db/migrate.py) or the service settings."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context

from fp8_policy.db import models  # noqa: F401  (registers the tables on Base.metadata)
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
    engine = create_db_engine(_url())
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=Base.metadata,
            render_as_batch=connection.dialect.name == "sqlite",
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
