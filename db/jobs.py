"""All SQL of the ingest job queue (db/job_models.py): enqueue, claim with a lease, heartbeat, finish.

Claiming is one conditional UPDATE on both backends: PostgreSQL first picks a candidate with
`FOR UPDATE SKIP LOCKED` (concurrent workers never wait on each other's rows); SQLite serialises writers,
and the UPDATE re-checks that the job is still claimable, so two processes never both get it
(https://www.postgresql.org/docs/current/sql-select.html#SQL-FOR-UPDATE-SHARE). A job is claimable when
queued, or `doing` with its lease run out (its worker died or hangs). A `finalize` job is claimable
only once every rank job of its run is done. Repositories flush, never commit (db/session.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, exists, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import aliased

from fp8_policy.db.job_models import NO_RANK, IngestJob
from fp8_policy.db.run_models import Run, RunStatus
from fp8_policy.db.runs import RunRepository, utcnow
from fp8_policy.db.session import Repository, rows_affected

UNFINISHED = ("queued", "doing")


class LeaseLost(Exception):
    """The job is no longer held by this worker (lease expired and retried elsewhere, run deleted or failed)."""


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    id: int
    run_id: int
    kind: str
    rank: int
    attempts: int


class JobRepository(Repository):
    # --- enqueue ----------------------------------------------------------------------------
    def enqueue_plan(self, run_id: int) -> bool:
        """Queue the first job of a run's ingest unless unfinished jobs exist (or the run is gone); False when
        nothing was queued. The run's row is locked first (RunRepository.lock's order: a delete racing this
        waits for it or is waited for)."""
        if RunRepository(self.session).lock(run_id, "write") is None or self._has_unfinished(run_id):
            return False
        self.session.execute(delete(IngestJob).where(IngestJob.run_id == run_id))
        try:
            with self.session.begin_nested():
                self.session.execute(insert(IngestJob).values(self._row(run_id, "plan", NO_RANK)))
        except IntegrityError:  # another process queued it at the same moment
            return False
        return True

    def add_plan(self, run_id: int) -> None:
        """Queue the first job of a run created in this very transaction: no other job of it can exist yet, so
        neither the run's lock nor a SAVEPOINT is needed (the upload's one short write transaction holds both rows)."""
        self.session.execute(insert(IngestJob).values(self._row(run_id, "plan", NO_RANK)))

    def add_rank_jobs(
        self, run_id: int, ranks: list[int], done: dict[int, dict[str, Any]] | None = None, finalized: bool = False
    ) -> None:
        """One parse-and-store job per rank plus the run's finalize job (claimable once all ranks are done);
        ranks in `done` were stored by the caller's transaction: their job is recorded done with its result,
        and so is the finalize job when `finalized` (the caller's transaction finalizes the run too)."""
        done = done or {}
        rows = [self._row(run_id, "rank", rank) for rank in ranks] + [self._row(run_id, "finalize", NO_RANK)]
        for row in rows:
            if row["kind"] == "rank" and row["rank"] in done:
                row.update(status="done", attempts=1, result=done[row["rank"]])
            elif row["kind"] == "finalize" and finalized:
                row.update(status="done", attempts=1)
        self.session.execute(insert(IngestJob), rows)

    def orphaned_runs(self) -> list[int]:
        """Runs `queued` or `processing` with no unfinished job (an API process stopped before queueing, a
        database from before the queue existed): the caller queues them again."""
        pending = exists().where(IngestJob.run_id == Run.id, IngestJob.status.in_(UNFINISHED))
        query = (
            select(Run.id).where(Run.status.in_((RunStatus.queued, RunStatus.processing)), ~pending).order_by(Run.id)
        )
        return list(self.session.scalars(query))

    # --- claim and hold ---------------------------------------------------------------------
    def claim(self, owner: str, lease_seconds: float, now: datetime | None = None) -> ClaimedJob | None:
        """Take the oldest claimable job with a lease for `owner`; None when there is none."""
        for _ in range(5):
            now = now or utcnow()
            candidate = self.session.scalar(
                select(IngestJob.id)
                .where(self._claimable(now))
                .order_by(IngestJob.id)
                .limit(1)
                .with_for_update(skip_locked=True, of=IngestJob)
            )
            if candidate is None:
                return None
            taken = self.session.execute(
                update(IngestJob)
                .where(IngestJob.id == candidate, self._claimable(now))
                .values(
                    status="doing",
                    owner=owner,
                    lease_until=now + timedelta(seconds=lease_seconds),
                    attempts=IngestJob.attempts + 1,
                )
                .execution_options(synchronize_session=False)
            )
            if rows_affected(taken) == 1:
                job = self.session.get(IngestJob, candidate, populate_existing=True)
                assert job is not None  # the row this transaction just updated
                return ClaimedJob(job.id, job.run_id, job.kind, job.rank, job.attempts)
            now = None
        return None

    def _claimable(self, now: datetime) -> ColumnElement[bool]:
        ranks = aliased(IngestJob)
        ranks_left = exists().where(ranks.run_id == IngestJob.run_id, ranks.kind == "rank", ranks.status != "done")
        return and_(
            or_(IngestJob.status == "queued", and_(IngestJob.status == "doing", IngestJob.lease_until < now)),
            or_(IngestJob.kind != "finalize", ~ranks_left),
        )

    def renew(self, owner: str, job_ids: list[int], lease_seconds: float) -> int:
        """Heartbeat: extend the leases `owner` still holds; returns how many it still holds."""
        if not job_ids:
            return 0
        result = self.session.execute(
            update(IngestJob)
            .where(IngestJob.id.in_(job_ids), IngestJob.owner == owner, IngestJob.status == "doing")
            .values(lease_until=utcnow() + timedelta(seconds=lease_seconds))
            .execution_options(synchronize_session=False)
        )
        return rows_affected(result)

    def expire_leases_of(self, owners: list[str]) -> int:
        """Leases of owners known to be dead (a stopped process on this host) run out now, not at lease end."""
        if not owners:
            return 0
        result = self.session.execute(
            update(IngestJob)
            .where(IngestJob.owner.in_(owners), IngestJob.status == "doing")
            .values(lease_until=utcnow() - timedelta(seconds=1))
            .execution_options(synchronize_session=False)
        )
        return rows_affected(result)

    def owners_holding(self) -> list[str]:
        query = select(IngestJob.owner).where(IngestJob.status == "doing", IngestJob.owner.is_not(None)).distinct()
        return list(self.session.scalars(query))

    # --- finish -----------------------------------------------------------------------------
    def complete(self, job: ClaimedJob, owner: str, result: dict[str, Any] | None = None) -> None:
        """Mark the job done in the caller's transaction (first statement: it locks the job row, so the
        store that follows is exclusive); raises LeaseLost when `owner` no longer holds it."""
        self._settle(job, owner, status="done", result=result)

    def fail(self, job: ClaimedJob, owner: str, error: str) -> None:
        """This job failed: it and every other unfinished job of its run stop (LeaseLost if not held)."""
        self._settle(job, owner, status="failed", error=error)
        self.cancel_run(job.run_id, f"cancelled: job {job.id} failed")

    def _settle(self, job: ClaimedJob, owner: str, **values: Any) -> None:
        """Store `values` on the job and release its lease, if `owner` still holds it; LeaseLost if not."""
        held = self.session.execute(
            update(IngestJob)
            .where(IngestJob.id == job.id, IngestJob.owner == owner, IngestJob.status == "doing")
            .values(owner=None, lease_until=None, **values)
            .execution_options(synchronize_session=False)
        )
        if rows_affected(held) != 1:
            raise LeaseLost(f"job {job.id} ({job.kind} of run {job.run_id}) is no longer held by {owner}")

    def cancel_run(self, run_id: int, error: str) -> None:
        self.session.execute(
            update(IngestJob)
            .where(IngestJob.run_id == run_id, IngestJob.status.in_(UNFINISHED))
            .values(status="failed", error=error, owner=None, lease_until=None)
            .execution_options(synchronize_session=False)
        )

    # --- reads ------------------------------------------------------------------------------
    def result_of(self, run_id: int, kind: str, rank: int = NO_RANK) -> dict[str, Any] | None:
        return self.session.scalar(
            select(IngestJob.result).where(
                IngestJob.run_id == run_id, IngestJob.kind == kind, IngestJob.rank == rank, IngestJob.status == "done"
            )
        )

    def rank_results(self, run_id: int) -> dict[int, dict[str, Any]]:
        query = select(IngestJob.rank, IngestJob.result).where(
            IngestJob.run_id == run_id, IngestJob.kind == "rank", IngestJob.status == "done"
        )
        return {rank: result or {} for rank, result in self.session.execute(query)}

    def rank_count(self, run_id: int) -> int:
        query = select(func.count()).select_from(IngestJob).where(IngestJob.run_id == run_id, IngestJob.kind == "rank")
        return int(self.session.scalar(query) or 0)

    def jobs_of(self, run_id: int) -> list[IngestJob]:
        return list(self.session.scalars(select(IngestJob).where(IngestJob.run_id == run_id).order_by(IngestJob.id)))

    def _has_unfinished(self, run_id: int) -> bool:
        query = select(IngestJob.id).where(IngestJob.run_id == run_id, IngestJob.status.in_(UNFINISHED)).limit(1)
        return self.session.scalar(query) is not None

    @staticmethod
    def _row(run_id: int, kind: str, rank: int) -> dict[str, Any]:
        return {
            "run_id": run_id,
            "kind": kind,
            "rank": rank,
            "status": "queued",
            "attempts": 0,
            "created_at": utcnow(),
            "result": None,
        }
