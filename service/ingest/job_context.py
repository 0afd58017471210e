"""`JobContext`: what an ingest job needs (service/ingest/pipeline.py runs the jobs, service/ingest/worker.py
claims them).

Apart from pipeline.py because the worker makes its context when the app starts, on `fp8-policy serve`'s start-up
path, while the pipeline (the archive readers and the stats-log parser) is imported by the first job a worker runs
(issue 21, tests/service/app/test_start_up_imports.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from fp8_policy.service.settings import Settings
from fp8_policy.service.storage.archive import ArchiveStore


@dataclass(frozen=True, slots=True)
class JobContext:
    """What a job needs: the database, the settings, the archive store and the lease holder's name."""

    factory: sessionmaker[Session]
    settings: Settings
    store: ArchiveStore
    owner: str
    # Called with a job's id once the job is recorded done but its worker still has work after it (the run
    # summary): the worker stops renewing that lease, which would otherwise be reported as lost.
    release: Callable[[int], None] | None = None
    # Called with the database and a run's id once a finalize job made the run ready, after the job's lease is
    # released: what follows an ingest (the run summary) is wired by whoever builds the worker (service/app.py,
    # service/worker_cli.py: service/after_ingest.py), so the ingest imports no feature that reads its runs.
    after_ready: Callable[[sessionmaker[Session], int], None] | None = None
