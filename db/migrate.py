"""Run the Alembic migrations programmatically (CLI `fp8-policy db upgrade`, `fp8-policy serve`, tests, `make run`).

An upgrade to head first asks whether the database is already there (`at_head`): the head is read from the
migration files' `revision = ...` / `down_revision = ...` lines and compared with the database's
`alembic_version` row, without importing Alembic. A restarted service is almost always at head, and Alembic's
import plus its own check cost about 0.3 s of CPU there (issue 21: a restart answers within 1 s). Anything that
is not one plain answer (no version table, another revision, several heads, a merge revision, a file the
pattern does not read) goes to Alembic, which decides as before.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import inspect, text

import fp8_policy
from fp8_policy.db.session import create_db_engine

if TYPE_CHECKING:
    from alembic.config import Config

# The lines Alembic's script template writes (alembic/script.py.mako): `revision = "abc"`,
# `down_revision = "xyz"` or `down_revision = None`.
_REVISION = re.compile(r"^revision(?:\s*:[^=\n]+)?\s*=\s*(.+?)\s*$", re.MULTILINE)
_DOWN_REVISION = re.compile(r"^down_revision(?:\s*:[^=\n]+)?\s*=\s*(.+?)\s*$", re.MULTILINE)
_QUOTED = re.compile(r"""(["'])([A-Za-z0-9_.-]+)\1""")


def _script_location() -> Path:
    """alembic/ installs as `fp8_policy/migrations` in a wheel (setup.py); a source checkout or an editable
    install uses the repository's alembic/ next to the `fp8_policy` folder."""
    package = Path(fp8_policy.__file__).resolve().parent
    installed = package / "migrations"
    return installed if (installed / "env.py").is_file() else package.parent / "alembic"


SCRIPT_LOCATION = str(_script_location())


def alembic_config(url: str) -> Config:
    """Config pointing at the installed migrations, with the database URL passed in directly."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    config.attributes["database_url"] = url
    return config


def script_head(location: Path | None = None) -> str | None:
    """The one head revision of the migration files, or None when the files do not give one plain answer."""
    versions = Path(location or SCRIPT_LOCATION) / "versions"
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in versions.glob("*.py"):
        source = path.read_text(encoding="utf-8")
        revision, down = _REVISION.findall(source), _DOWN_REVISION.findall(source)
        if len(revision) != 1 or len(down) != 1 or not (own := _QUOTED.fullmatch(revision[0])):
            return None
        revisions.add(own.group(2))
        if down[0] == "None":
            continue
        parent = _QUOTED.fullmatch(down[0])
        if parent is None:  # a merge revision (a tuple) or an expression: Alembic reads it
            return None
        parents.add(parent.group(2))
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 and parents <= revisions else None


def database_revisions(url: str) -> set[str] | None:
    """The revisions in the database's `alembic_version` table; None when it has no such table."""
    engine = create_db_engine(url)
    try:
        with engine.connect() as connection:
            if not inspect(connection).has_table("alembic_version"):
                return None
            return {str(row[0]) for row in connection.execute(text("SELECT version_num FROM alembic_version"))}
    finally:
        engine.dispose()


def at_head(url: str) -> bool:
    """Whether the database is at the migration files' one head (then an upgrade to head has nothing to do)."""
    head = script_head()
    return head is not None and database_revisions(url) == {head}


def upgrade(url: str, revision: str = "head") -> None:
    if revision == "head" and at_head(url):
        return
    from alembic import command

    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    from alembic import command

    command.downgrade(alembic_config(url), revision)
