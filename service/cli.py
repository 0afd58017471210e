"""The server commands of the `fp8-policy` console script (`serve`, `db upgrade`, ...); `cli` also carries the
client commands (`upload`, `status`, ... from `client/cli/`) so `python -m fp8_policy.service.cli` has them all.

Import rule: at module level only click and `fp8_policy.client.cli`; import anything of the server (settings,
uvicorn, db, app) inside the command functions. The installed console script (`fp8_policy/cli.py`) lists
these commands on the base install too, where the server extra is missing, and answers them with a one-line
hint (tests/test_console_script.py checks this module imports with the server's dependencies absent).
"""

from __future__ import annotations

import gc
import logging
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import click

from fp8_policy.client.cli import ClosedPipeGroup, register_client_commands, version_option
from fp8_policy.service.auth.cli import token
from fp8_policy.service.worker_cli import worker

if TYPE_CHECKING:
    from fastapi import FastAPI

    from fp8_policy.service.settings import Settings
    from fp8_policy.service.transport.starting import StartingResponder


@click.group(cls=ClosedPipeGroup)
@version_option()
def cli() -> None:
    """fp8-policy: FP8 precision-policy recommender for Transformer Engine debug logs."""


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option("--demo/--no-demo", default=None, help="Load demo runs when the database is empty.")
@click.option(
    "--migrate/--no-migrate", default=True, show_default=True, help="Run the database migrations before serving."
)
@click.option("--log-level", default="info", show_default=True)
@click.option(
    "--ingest/--no-ingest",
    default=None,
    help="Run ingest jobs in this process (default) or leave them to `fp8-policy worker` processes.",
)
@click.option(
    "--allow-anonymous",
    is_flag=True,
    help="On a non-loopback --host, serve requests without a token while no access token exists.",
)
@click.option(
    "--header-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds to receive a request head [FP8_POLICY_HEADER_TIMEOUT, 15].",
)
@click.option(
    "--body-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds a request body may stall [FP8_POLICY_BODY_TIMEOUT, 30].",
)
@click.option(
    "--max-uploads",
    type=click.IntRange(min=1),
    default=None,
    help="Uploads received at once, 503 beyond [FP8_POLICY_MAX_CONCURRENT_UPLOADS, 8].",
)
@click.option(
    "--limit-concurrency",
    type=click.IntRange(min=1),
    default=None,
    help="Open connections at most, lowered to fit `ulimit -n` [FP8_POLICY_LIMIT_CONCURRENCY, 1024].",
)
def serve(
    host: str,
    port: int,
    demo: bool | None,
    migrate: bool,
    log_level: str,
    ingest: bool | None,
    allow_anonymous: bool,
    header_timeout: float | None,
    body_timeout: float | None,
    max_uploads: int | None,
    limit_concurrency: int | None,
) -> None:
    """Start the API with uvicorn (on a non-loopback --host only once an access token exists)."""
    # No cyclic garbage collection while the app imports (re-enabled when it serves, _hand_over_when_started):
    # importing FastAPI, SQLAlchemy, pydantic models and the routes allocates enough objects to run the collector
    # over the growing heap dozens of times, about 8 % of start-up's CPU measured, and start-up makes little garbage.
    gc.disable()
    from fp8_policy.service.transport import starting

    try:  # first of all: the port answers /healthz with 503 "starting" while the rest loads (transport/starting.py)
        sockets = starting.listen(host, port)
    except OSError as exc:
        click.echo(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}", err=True)
        sys.exit(3)  # uvicorn's exit status when it cannot bind (STARTUP_FAILURE)
    responder = starting.StartingResponder(sockets).start()
    overrides: dict[str, object] = {  # the settings these options replace (None: not given)
        "load_demo": demo,
        "ingest_in_process": ingest,
        "header_timeout": header_timeout,
        "body_timeout": body_timeout,
        "max_concurrent_uploads": max_uploads,
        "limit_concurrency": limit_concurrency,
    }
    try:
        _serve(sockets, responder, host, port, migrate, log_level, allow_anonymous, overrides)
    finally:
        responder.stop()
        for sock in sockets:
            sock.close()


def _serve(
    sockets: list[socket.socket],
    responder: StartingResponder,
    host: str,
    port: int,
    migrate: bool,
    log_level: str,
    allow_anonymous: bool,
    overrides: dict[str, object],
) -> None:
    """`serve` once its sockets are bound: settings, migrations, the access check, the app; uvicorn then takes
    the sockets over from `responder` as soon as the app's lifespan has started."""
    from fp8_policy.service.app import create_app
    from fp8_policy.service.settings import get_settings
    from fp8_policy.service.transport.server import raise_descriptor_limit, uvicorn_config
    from fp8_policy.service.transport.shutdown import BoundedShutdownServer
    from fp8_policy.service.transport.starting import url

    settings = get_settings().model_copy(update={k: v for k, v in overrides.items() if v is not None})
    if migrate:
        _upgrade(settings)
    settings = _check_anonymous_access(settings, host, allow_anonymous)
    descriptors = raise_descriptor_limit()
    app = create_app(settings)
    app.state.long_running = True
    _hand_over_when_started(app, responder, url(sockets))
    config = uvicorn_config(app, settings, host=host, port=port, log_level=log_level, descriptors=descriptors)
    # SIGTERM: stopped within 4 s, in-flight ingest resumes at the next start; from the signal on, the warm-up
    # starts no render worker (its forkserver preloads matplotlib for seconds: the stop would wait for it)
    BoundedShutdownServer(config, on_signal=app.state.renderer.stop_starting).run(sockets=sockets)


def _hand_over_when_started(app: FastAPI, responder: StartingResponder, url: str) -> None:
    """Stop the start-up responder once the app's lifespan has started: uvicorn accepts on the sockets next."""
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[Any]:
        async with inner(app) as state:
            responder.stop()
            # What the imports allocated lives as long as the process: frozen first, the collector's first run
            # after enable() does not walk it (one gen-0 pass over ~110k objects, 60-70 ms of a restart's ~1 s;
            # https://docs.python.org/3/library/gc.html#gc.freeze). A full collection there finds ~800
            # unreachable objects, which stay; the warm-up's gc.freeze (warm_up_process) covers what comes later.
            gc.freeze()
            gc.enable()  # disabled by `serve` for the imports
            app.state.serving.set()  # the warm-up (kernels, scikit-learn, buffers) may start: service/app.py
            logging.getLogger("uvicorn.error").info("fp8-policy serving on %s", url)
            yield state

    app.router.lifespan_context = lifespan


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


def _check_anonymous_access(settings: Settings, host: str, allow_anonymous: bool) -> Settings:
    """Exit with one line when `host` is not loopback, no token exists and --allow-anonymous is not given;
    otherwise the settings with `allow_anonymous` decided for this address (service/auth/binding.py)."""
    from fp8_policy.db.session import create_db_engine, create_session_factory, session_scope
    from fp8_policy.service.auth import binding
    from fp8_policy.service.auth.actions import tokens_required

    engine = create_db_engine(settings.resolved_database_url)
    try:
        with session_scope(create_session_factory(engine)) as session:
            refusal = binding.refusal(host, allow_anonymous, tokens_required(session))
    finally:
        engine.dispose()
    if refusal:
        click.echo(refusal, err=True)
        sys.exit(2)
    return settings.model_copy(update={"allow_anonymous": binding.anonymous_allowed(host, allow_anonymous)})


def _upgrade(settings: Settings, revision: str = "head") -> None:
    from fp8_policy.db.migrate import upgrade

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.resolved_database_url, revision)


cli.add_command(token)
cli.add_command(worker)
register_client_commands(cli)


def main() -> None:
    sys.exit(cli())  # click handles exit codes; sys.exit for the return value of standalone mode


if __name__ == "__main__":
    main()
