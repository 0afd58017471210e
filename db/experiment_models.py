"""ORM class of an experiment posted to a run (POST /api/v1/runs/{id}/experiments): short training arms from one
state (BF16, all-low-precision, the recommendation, rule baselines, frontier points) with their held-out losses.

One row per posted experiment; the arms, as validated, placed on the run's frontier and judged, are kept in `body`
(JSON) with the verdict the service computed when it was posted. Deleted with its run.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from fp8_policy.db.base import Base, UTCDateTime


class ExperimentRow(Base):
    __tablename__ = "experiments"
    __table_args__ = (Index("ix_experiments_run_id_id", "run_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))
    steps: Mapped[int] = mapped_column(Integer)
    uploaded_by: Mapped[str | None] = mapped_column(String(100))  # the access token's name; NULL when anonymous
    body: Mapped[dict[str, Any]] = mapped_column(JSON)  # {"arms": [...], "setup": {...}, "verification": {...}}
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
