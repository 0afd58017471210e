"""`fp8-policy worker`: a process that runs ingest jobs from the database queue (service/ingest/worker.py), with
what follows a run made ready wired in as the app wires it (service/after_ingest.py).

Import rule (as service/cli.py): click only at module level, the server inside the command.
"""

from __future__ import annotations

import click


@click.command()
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=None,
    help="Jobs (one rank each) run at once [FP8_POLICY_INGEST_WORKERS, 1].",
)
@click.option(
    "--migrate/--no-migrate",
    default=False,
    show_default=True,
    help="Run the database migrations first (do it once per deployment, not from every worker).",
)
@click.option("--log-level", default="info", show_default=True)
def worker(concurrency: int | None, migrate: bool, log_level: str) -> None:
    """Run ingest jobs until SIGTERM or Ctrl-C, then finish the jobs in hand.

    Any number of workers, on any machine that reaches FP8_POLICY_DATABASE_URL and the archive store
    (FP8_POLICY_ARCHIVE_URL), share the queue; a killed worker's job is retried by another one after
    FP8_POLICY_JOB_LEASE_SECONDS. Serve the API with `fp8-policy serve --no-ingest` beside them.
    """
    import logging
    import signal

    from fp8_policy.db.session import create_db_engine, create_session_factory
    from fp8_policy.service import after_ingest
    from fp8_policy.service.ingest.worker import IngestWorker, warm_up_process
    from fp8_policy.service.settings import get_settings

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = get_settings()
    if migrate:
        from fp8_policy.db.migrate import upgrade

        settings.data_dir.mkdir(parents=True, exist_ok=True)
        upgrade(settings.resolved_database_url)
    engine = create_db_engine(settings.resolved_database_url)
    runner = IngestWorker(
        create_session_factory(engine),
        settings,
        run_jobs=True,
        threads=concurrency,
        after_ready=after_ingest.store_summary,
    )
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: runner.request_stop())
    warm_up_process()
    click.echo(f"worker {runner.owner}: {runner.threads} job(s) at once, archives in {runner.store.url}", err=True)
    try:
        runner.serve_forever()
    finally:
        engine.dispose()
