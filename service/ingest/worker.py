"""Ingest workers: threads that claim jobs from the queue (db/jobs.py), hold them with a heartbeat, and run
them (service/ingest/pipeline.py).

The same class runs inside the API process (the embedded default: nothing extra to start) and as
`fp8-policy worker` on any machine that reaches the database and the archive store. A job is held by a
lease renewed every third of `job_lease_seconds`; a killed worker's jobs become claimable when their lease
runs out (at once when the holder was a process on this host that no longer exists), so another worker
retries them, and a live process's jobs are never taken.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session, sessionmaker

from fp8_policy._lazy import lazy_module
from fp8_policy.db.jobs import ClaimedJob, JobRepository
from fp8_policy.db.session import session_scope
from fp8_policy.service.ingest.job_context import JobContext
from fp8_policy.service.ingest.kernel_warmup import prepare
from fp8_policy.service.ingest.kernel_warmup import warm_parser as warm_parser  # re-exported: app, tests, bench
from fp8_policy.service.settings import Settings
from fp8_policy.service.storage.archive import ArchiveStore, store_for

if TYPE_CHECKING:
    from fp8_policy.service.ingest import pipeline
else:  # imported on first use (the first job): start-up path, tests/service/app/test_start_up_imports.py
    pipeline = lazy_module("fp8_policy.service.ingest.pipeline")

log = logging.getLogger("fp8_policy.ingest")


def warm_up_process() -> None:
    """The start-up warm-up of a serving process (`fp8-policy serve`, `fp8-policy worker`): the kernels
    (kernel_warmup.prepare: compiled in a child process when not cached, then loaded), then gc.freeze() (https://docs.python.org/3/library/gc.html#gc.freeze) on what start-up left:
    those objects (FastAPI, SQLAlchemy, numba and the modules) live as long as the process, and unfrozen, every
    full collection walked them again: 150-240 ms per gen-2 collection in the service on the 2-core dev
    machine, and one landed in every ingest (a run's SeriesRecord objects trigger it). Not for processes that
    build app after app (the test suite): what is frozen is never collected, so their cycles would pile up.

    Last, one parse's buffers are put in the parser's free lists with every page touched (prefault_buffers,
    ~250 MB resident): on a VM that hands freed pages back to its host they cost ~2 ms/MB on first touch,
    otherwise paid by the first upload (policy/parse/buffer_pool.py)."""
    import gc

    from fp8_policy.policy.parse.stats_scan import prefault_buffers

    prepare()  # meanwhile ingest parses small uploads with the interpreted kernels (policy/parse/kernels.py)
    import sklearn.linear_model  # noqa: F401 - the analysis imports it on first use (policy/analysis/trends.py)
    import sklearn.neighbors  # noqa: F401

    gc.collect()
    gc.freeze()
    prefault_buffers()


def new_owner_name() -> str:
    """host:pid:token: unique per worker object; host and pid let a restarted process recognise its dead predecessor."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _process_gone(owner: str) -> bool:
    """True when `owner` names a process on this host that does not exist any more."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit() or int(pid_text) == os.getpid():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # exists, owned by another user
        return False
    return False


class IngestWorker:
    """`threads` job loops plus a heartbeat; with `run_jobs=False` (`serve --no-ingest`) it only queues."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        settings: Settings,
        *,
        run_jobs: bool | None = None,
        threads: int | None = None,
        store: ArchiveStore | None = None,
        after_ready: Callable[[sessionmaker[Session], int], None] | None = None,
    ) -> None:
        """`after_ready`: what follows a run made ready (JobContext.after_ready; service/after_ingest.py)."""
        self.factory = factory
        self.settings = settings
        self.store = store or store_for(settings)
        self.run_jobs = settings.ingest_in_process if run_jobs is None else run_jobs
        self.threads = max(1, threads or settings.ingest_workers)
        self.owner = new_owner_name()
        self.context = JobContext(
            factory, settings, self.store, self.owner, release=self._release, after_ready=after_ready
        )
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Condition()
        self._held: set[int] = set()
        self._busy = 0
        self._last_empty = 0.0  # monotonic time a loop last found nothing to claim
        self._last_claim = 0.0
        self._next_maintenance = 0.0
        self._threads: list[threading.Thread] = []

    # --- used by the API ---------------------------------------------------------------------
    def submit(self, run_id: int) -> None:
        """Queue the ingest of a run (no-op while it has unfinished jobs) and wake a local loop."""
        with session_scope(self.factory) as session:
            JobRepository(session).enqueue_plan(run_id)
        self._wake.set()

    def wake(self) -> None:
        """A job was queued by the caller's own transaction (now committed): a local loop looks at once."""
        self._wake.set()

    def resume_interrupted(self) -> None:
        """Start the loops; runs left without a job (or held by a dead local process) are taken up."""
        if self.run_jobs and not self._threads:
            self.start()

    def start(self) -> None:
        self._maintain()
        for k in range(self.threads):
            thread = threading.Thread(target=self._loop, name=f"ingest-{k}", daemon=True)
            thread.start()
            self._threads.append(thread)
        beat = threading.Thread(target=self._heartbeat, name="ingest-heartbeat", daemon=True)
        beat.start()
        self._threads.append(beat)

    def wait_idle(self, timeout: float | None = None) -> None:
        """Block until no job is running here and a loop found nothing left to claim (TimeoutError after `timeout`)."""
        if not self._threads:
            return
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        with self._lock:
            while not (self._busy == 0 and self._last_empty > max(start, self._last_claim)):
                self._wake.set()
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"ingest still busy after {timeout} s")
                self._lock.wait(0.05 if remaining is None else min(0.05, remaining))

    def running(self) -> bool:
        """Whether a job is being run here now (background passes wait for it: service/analysis/summary.py)."""
        with self._lock:
            return bool(self._held)

    def shutdown(self) -> None:
        """Finish the jobs in hand, then stop (a killed process's jobs are retried after their lease)."""
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join()
        self._threads.clear()

    def request_stop(self) -> None:
        """Ask the loops to stop after the jobs in hand (safe from a signal handler)."""
        self._stop.set()
        self._wake.set()

    def serve_forever(self) -> None:
        """`fp8-policy worker`: run until `request_stop()` (SIGTERM / SIGINT), then finish the jobs in hand."""
        self.start()
        while not self._stop.wait(1.0):
            pass
        self.shutdown()

    # --- the loops ---------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            job = None
            with self._lock:
                self._busy += 1
            try:
                job = self._claim()
                if job is not None:
                    pipeline.run_job(self.context, job)
            except Exception:  # the database is unreachable, ...: try again after a pause
                log.exception("ingest loop error")
                self._stop.wait(self.settings.job_poll_seconds)
            finally:
                with self._lock:
                    if job is not None:
                        self._held.discard(job.id)
                    self._busy -= 1
                    self._lock.notify_all()
            if job is None:
                self._wake.wait(self.settings.job_poll_seconds)
                self._wake.clear()
                if time.monotonic() >= self._next_maintenance:
                    self._maintain()

    def _claim(self) -> ClaimedJob | None:
        with session_scope(self.factory) as session:
            job = JobRepository(session).claim(self.owner, self.settings.job_lease_seconds)
        with self._lock:
            if job is None:
                self._last_empty = time.monotonic()
            else:
                self._held.add(job.id)
                self._last_claim = time.monotonic()
        return job

    def _release(self, job_id: int) -> None:
        """A job recorded done whose thread still works after it (pipeline's run summary): no more renewals."""
        with self._lock:
            self._held.discard(job_id)

    def _heartbeat(self) -> None:
        interval = self.settings.job_lease_seconds / 3
        while not self._stop.wait(interval):
            with self._lock:
                held = sorted(self._held)
            if not held:
                continue
            try:
                with session_scope(self.factory) as session:
                    kept = JobRepository(session).renew(self.owner, held, self.settings.job_lease_seconds)
                with self._lock:
                    still_held = len(self._held.intersection(held))  # a job may have finished meanwhile
                if kept < still_held:
                    log.warning("%s of %s job lease(s) were lost", still_held - kept, still_held)
            except Exception:
                log.exception("heartbeat failed")

    def _maintain(self) -> None:
        """Expire the leases of dead local processes; queue runs that have no job (see JobRepository.orphaned_runs)."""
        self._next_maintenance = time.monotonic() + self.settings.job_lease_seconds
        try:
            with session_scope(self.factory) as session:
                jobs = JobRepository(session)
                jobs.expire_leases_of([o for o in jobs.owners_holding() if _process_gone(o)])
                orphans = jobs.orphaned_runs()
            for run_id in orphans:
                log.info("queueing the ingest of run %s again", run_id)
                self.submit(run_id)
        except Exception:
            log.exception("ingest maintenance failed")
