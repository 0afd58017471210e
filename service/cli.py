"""The server commands of the `fp8-policy` console script (`serve`, `db upgrade`, ...); `cli` also carries the
client commands (`upload`, `status`, ... from `client/cli.py`) so `python -m fp8_policy.service.cli` has them all.

Import rule: at module level only click and `fp8_policy.client.cli`; import anything of the server (settings,
uvicorn, db, app) inside the command functions. The installed console script (`fp8_policy/cli.py`) lists
these commands on the base install too, where the server extra is missing, and answers them with a one-line
hint (tests/test_console_script.py checks this module imports with the server's dependencies absent).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from fp8_policy.client.cli import register_client_commands
from fp8_policy.service.ingest.cli import worker

if TYPE_CHECKING:
    from fp8_policy.service.settings import Settings


@click.group()
def cli() -> None:
    """fp8-policy: FP8 precision-policy recommender for Transformer Engine debug logs."""


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option("--demo/--no-demo", default=None, help="Load demo runs when the database is empty.")
@click.option("--migrate/--no-migrate", default=True, show_default=True,
              help="Run the database migrations before serving.")
@click.option("--log-level", default="info", show_default=True)
@click.option("--ingest/--no-ingest", default=None,
              help="Run ingest jobs in this process (default) or leave them to `fp8-policy worker` processes.")
def serve(host: str, port: int, demo: bool | None, migrate: bool, log_level: str, ingest: bool | None) -> None:
    """Start the API with uvicorn."""
    import uvicorn

    from fp8_policy.service.app import create_app
    from fp8_policy.service.settings import get_settings

    settings = get_settings()
    if demo is not None:
        settings = settings.model_copy(update={"load_demo": demo})
    if ingest is not None:
        settings = settings.model_copy(update={"ingest_in_process": ingest})
    if migrate:
        _upgrade(settings)
    uvicorn.run(create_app(settings), host=host, port=port, log_level=log_level)


@cli.group()
def db() -> None:
    """Database maintenance."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True)
def db_upgrade(revision: str) -> None:
    """Apply the Alembic migrations to FP8_POLICY_DATABASE_URL (default: SQLite in the data dir)."""
    from fp8_policy.service.settings import get_settings

    _upgrade(get_settings(), revision)
    click.echo(f"database at {revision}")


def _upgrade(settings: Settings, revision: str = "head") -> None:
    from fp8_policy.db.migrate import upgrade

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.resolved_database_url, revision)


cli.add_command(worker)
register_client_commands(cli)


def main() -> None:
    sys.exit(cli())  # click handles exit codes; sys.exit for the return value of standalone mode


if __name__ == "__main__":
    main()
