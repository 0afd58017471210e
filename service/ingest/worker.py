"""Background ingest: a small thread pool owned by the app; resumes interrupted runs at start-up."""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor

from sqlalchemy.orm import Session, sessionmaker

from fp8_policy.db.repositories import RunRepository
from fp8_policy.db.session import session_scope
from fp8_policy.service.ingest.pipeline import process_run
from fp8_policy.service.settings import Settings

log = logging.getLogger("fp8_policy.ingest")


class IngestWorker:
    def __init__(self, factory: sessionmaker[Session], settings: Settings) -> None:
        self.factory = factory
        self.settings = settings
        self._pool = ThreadPoolExecutor(max(1, settings.ingest_workers), thread_name_prefix="ingest")
        self._futures: dict[int, Future] = {}

    def submit(self, run_id: int) -> Future:
        future = self._pool.submit(process_run, self.factory, self.settings, run_id)
        self._futures[run_id] = future
        future.add_done_callback(lambda _f: self._futures.pop(run_id, None))
        return future

    def resume_interrupted(self) -> list[int]:
        """Runs a stopped service left `processing` or `queued` are queued again and submitted."""
        with session_scope(self.factory) as session:
            run_ids = RunRepository(session).requeue_interrupted()
        for run_id in run_ids:
            log.info("resuming ingest of run %s", run_id)
            self.submit(run_id)
        return run_ids

    def wait_idle(self, timeout: float | None = None) -> None:
        for future in list(self._futures.values()):
            future.result(timeout=timeout)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
