"""ORM class of the ingest job queue: one row per unit of ingest work (plan, one rank, finalize).

A job is handed out with a lease (`owner`, `lease_until`): the holder renews it while it works
(heartbeat); a job whose lease ran out is claimable again, so a killed worker's job is retried by
another one. Kinds: `plan` (scan the archive, create the rank jobs), `rank` (parse and store one
rank's series), `finalize` (layer table and run totals, the run becomes `ready`). `rank` is -1 for
the jobs that are not about one rank (a NOT NULL column keeps the unique key portable).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from fp8_policy.db.base import Base, UTCDateTime

JOB_KINDS = ("plan", "rank", "finalize")
JOB_STATUSES = ("queued", "doing", "done", "failed")
NO_RANK = -1


class IngestJob(Base):
    __tablename__ = "ingest_jobs"
    __table_args__ = (
        UniqueConstraint("run_id", "kind", "rank"),
        Index("ix_ingest_jobs_status_id", "status", "id"),
        {"sqlite_autoincrement": True},  # ids are never reused (migration ids_never_reused)
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))
    rank: Mapped[int] = mapped_column(Integer, default=NO_RANK)
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    owner: Mapped[str | None] = mapped_column(String(200))  # host:pid:token of the worker holding the lease
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    error: Mapped[str | None] = mapped_column(Text)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # what the job found: files, counts (finalize reads it)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
