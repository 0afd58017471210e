"""ORM classes of live runs: the log files a training job streams in, the detectors' state, the events found.

A live run is a `runs` row with status `live`. `live_files` holds one row per received file with the
acknowledged byte count (the next append must start there) and how far the detectors have parsed it;
`live_state` the per-series detector state (policy/live/events.SeriesState as JSON, one document per run);
`live_events` every early warning raised while the run was live, in order.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from fp8_policy.db.base import Base, UTCDateTime
from fp8_policy.policy.records import MAX_LAYER_CHARS, MAX_STAT_CHARS, MAX_TENSOR_CHARS

MAX_LIVE_PATH_CHARS = 500


class LiveFile(Base):
    __tablename__ = "live_files"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    path: Mapped[str] = mapped_column(String(MAX_LIVE_PATH_CHARS), primary_key=True)  # as in an archive
    kind: Mapped[str] = mapped_column(String(16))  # stats | metadata | scalars
    size: Mapped[int] = mapped_column(BigInteger)  # bytes received and acknowledged
    parsed_offset: Mapped[int] = mapped_column(BigInteger)  # bytes of whole lines the detectors have read
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class LiveState(Base):
    __tablename__ = "live_state"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    state: Mapped[dict[str, Any]] = mapped_column(JSON)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class LiveEventRow(Base):
    __tablename__ = "live_events"
    # ids are never reused (alembic/versions/2026-11-26_ids_never_reused.py): deliveries keep an event's id
    __table_args__ = (Index("ix_live_events_run_id_id", "run_id", "id"), {"sqlite_autoincrement": True})

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(32))
    severity: Mapped[str] = mapped_column(String(16))
    layer: Mapped[str] = mapped_column(String(MAX_LAYER_CHARS))
    tensor: Mapped[str] = mapped_column(String(MAX_TENSOR_CHARS))
    stat: Mapped[str] = mapped_column(String(MAX_STAT_CHARS))
    rank: Mapped[int] = mapped_column(Integer)
    iteration: Mapped[int] = mapped_column(BigInteger)
    value: Mapped[float | None] = mapped_column(Float(precision=53))
    message: Mapped[str] = mapped_column(Text)
    detail: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
