"""ORM classes of alerts: per-project rules (which events go to which webhook) and every delivery (the alert log).

A delivery is created in the same transaction as the event it reports (nothing is lost between the two) and sent
by any API process's sender thread, which claims it with a short lease; failed sends are retried with backoff
until `max_attempts`. `dedupe_key` + the rule's cooldown keep one episode from paging twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from fp8_policy.db.base import Base, UTCDateTime

DELIVERY_STATUSES = ("pending", "sending", "sent", "failed", "suppressed")


class AlertRule(Base):
    __tablename__ = "alert_rules"
    __table_args__ = {"sqlite_autoincrement": True}  # ids are never reused (migration ids_never_reused)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project: Mapped[str] = mapped_column(String(200), index=True)
    webhook_url: Mapped[str] = mapped_column(String(2000))
    format: Mapped[str] = mapped_column(String(16))  # slack | json
    events: Mapped[list[str]] = mapped_column(JSON)  # event kinds; empty = every kind
    min_severity: Mapped[str] = mapped_column(String(16))
    cooldown_seconds: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    created_by: Mapped[str | None] = mapped_column(String(100))


class AlertDelivery(Base):
    __tablename__ = "alert_deliveries"
    __table_args__ = (
        Index("ix_alert_deliveries_status_next", "status", "next_attempt_at"),
        Index("ix_alert_deliveries_rule_key", "rule_id", "dedupe_key"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    rule_id: Mapped[int | None] = mapped_column(ForeignKey("alert_rules.id", ondelete="SET NULL"))
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"), index=True)
    project: Mapped[str] = mapped_column(String(200))
    event_id: Mapped[int | None] = mapped_column(Integer)
    event: Mapped[dict[str, Any]] = mapped_column(JSON)  # the event as sent (kept when the run is deleted)
    dedupe_key: Mapped[str] = mapped_column(String(1000))
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime())
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
