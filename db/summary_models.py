"""ORM class of a run's stored summary: the default-threshold analysis and what the runs list shows.

One row per ready run, written after ingest (or on first read) and keyed by the policy version that computed
it: when the rules change (a new `POLICY_VERSION`), a stale row is recomputed, never served. The runs list reads
`severity`, `pattern`, `headline`, `to_bf16` and `precision_mix` from here instead of analysing every run it lists; GET /analysis
with default thresholds returns `analysis` as stored, and GET /recommendation without options its stored
`recommendation` (NULL when the run's metadata could not be read or the row predates the column).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from fp8_policy.db.base import Base, UTCDateTime


class RunSummary(Base):
    __tablename__ = "run_summaries"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    policy_version: Mapped[str] = mapped_column(String(32))
    severity: Mapped[str] = mapped_column(String(16))  # worst finding's severity, "ok" when none
    pattern: Mapped[str | None] = mapped_column(String(32))  # the first (worst) finding's pattern
    headline: Mapped[str | None] = mapped_column(Text)  # that finding's one-sentence summary
    to_bf16: Mapped[int] = mapped_column(Integer)  # layers the recommendation keeps in BF16
    gemm_overrides: Mapped[int] = mapped_column(Integer)  # layers with per-GEMM overrides
    # layers per recommended precision (the recommendation's headline.precision_mix) and its one GEMM speedup
    precision_mix: Mapped[dict[str, int] | None] = mapped_column(JSON, nullable=True)
    gemm_speedup: Mapped[float | None] = mapped_column(Float, nullable=True)
    analysis: Mapped[dict[str, Any]] = mapped_column(JSON)  # the default-threshold analysis as GET /analysis returns it
    # the default-options recommendation: {"run": what it was computed from, "json": the JSON answer,
    # "rendered": {format: {content, media_type, filename}}} (service/analysis/summary.py)
    recommendation: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    computed_at: Mapped[datetime] = mapped_column(UTCDateTime())
