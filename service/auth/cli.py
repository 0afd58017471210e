"""`fp8-policy token create|list|revoke`: manage access tokens in the database of FP8_POLICY_DATABASE_URL.

Imports nothing but click at module level (fp8_policy/cli.py lists server commands without loading the server).
Each command migrates the database first, so it works on a fresh one. Errors print one line, exit status 2.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import click

SCOPE_CHOICE = click.Choice(["read", "upload", "admin"])


@contextmanager
def _unit_of_work() -> Iterator[tuple[Any, Any]]:
    """(session, token hasher) on the configured database, migrated to head; AppError -> one line, exit 2."""
    from fp8_policy.db.migrate import upgrade
    from fp8_policy.db.session import create_db_engine, create_session_factory, session_scope
    from fp8_policy.service.auth.tokens import load_hasher
    from fp8_policy.service.errors import AppError
    from fp8_policy.service.settings import get_settings

    settings = get_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.resolved_database_url)
    engine = create_db_engine(settings.resolved_database_url)
    try:
        with session_scope(create_session_factory(engine)) as session:
            secret = settings.secret_key
            yield session, load_hasher(session, secret.get_secret_value() if secret else None)
    except AppError as exc:
        click.echo(f"error: {exc.error}: {exc.detail}", err=True)
        raise click.exceptions.Exit(2) from None
    finally:
        engine.dispose()


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value else "-"


@click.group("token")
def token() -> None:
    """Access tokens: `read` (every GET), `upload` (read + upload runs), `admin` (everything)."""


@token.command("create")
@click.option("--name", required=True, help="Unique name, recorded as `uploaded_by` on the runs it uploads.")
@click.option("--scope", required=True, type=SCOPE_CHOICE)
@click.option("--expires-days", type=click.IntRange(1, 36_500), help="Expire after N days (default: never).")
def create(name: str, scope: str, expires_days: int | None) -> None:
    """Create a token; it is printed once, as the last line (store it now: only its keyed hash is kept)."""
    from fp8_policy.service.auth.actions import create_token

    with _unit_of_work() as (session, hasher):
        row, secret = create_token(session, hasher, name, scope, expires_days)
        expires = f", expires {_when(row.expires_at)} UTC" if row.expires_at else ""
    click.echo(f"created token {row.name!r} (scope {row.scope}, prefix {row.prefix}{expires}); it is shown only now:")
    click.echo(secret)


@token.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def list_(as_json: bool) -> None:
    """Every token with its scope, prefix, state and dates (never the token)."""
    from fp8_policy.service.auth.actions import list_tokens, token_info

    with _unit_of_work() as (session, _hasher):
        infos = [token_info(t) for t in list_tokens(session)]
    if as_json:
        click.echo(json.dumps(infos, indent=2, default=lambda v: v.isoformat()))
        return
    if not infos:  # on stderr, stdout empty: as the client's listings (client/cli/common.echo_rows)
        click.echo("no tokens: the service is open on loopback (create one with `fp8-policy token create`)", err=True)
        return
    headers = ["NAME", "SCOPE", "PREFIX", "STATE", "CREATED", "LAST USED", "EXPIRES", "REVOKED"]
    rows = [
        [
            i["name"],
            i["scope"],
            i["prefix"],
            i["state"],
            _when(i["created_at"]),
            _when(i["last_used_at"]),
            _when(i["expires_at"]),
            _when(i["revoked_at"]),
        ]
        for i in infos
    ]
    widths = [max(len(h), *(len(r[k]) for r in rows)) for k, h in enumerate(headers)]
    for line in [headers, *rows]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())


@token.command("revoke")
@click.argument("name")
def revoke(name: str) -> None:
    """Revoke a token at once (every API process checks the database on each request)."""
    from fp8_policy.service.auth.actions import revoke_token, tokens_required

    with _unit_of_work() as (session, _hasher):
        row = revoke_token(session, name)
        still_closed = tokens_required(session)
    click.echo(f"revoked token {row.name!r} ({row.prefix})")
    if not still_closed:
        click.echo(
            "note: no unrevoked token is left, so a service on loopback (or started with --allow-anonymous) "
            "serves requests without a token again"
        )
