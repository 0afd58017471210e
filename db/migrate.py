"""Run the Alembic migrations programmatically (CLI `fp8-policy db upgrade`, tests, `make run`)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

import fp8_policy


def _script_location() -> Path:
    """alembic/ installs as `fp8_policy/migrations` in a wheel (setup.py); a source checkout or an editable
    install uses the repository's alembic/ next to the `fp8_policy` folder."""
    package = Path(fp8_policy.__file__).resolve().parent
    installed = package / "migrations"
    return installed if (installed / "env.py").is_file() else package.parent / "alembic"


SCRIPT_LOCATION = str(_script_location())


def alembic_config(url: str) -> Config:
    """Config pointing at the installed migrations, with the database URL passed in directly."""
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    config.attributes["database_url"] = url
    return config


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    command.downgrade(alembic_config(url), revision)
