"""API shapes of alert rules and the alert log."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field


class AlertRuleCreate(BaseModel):
    project: str = Field(description="Runs of this project raise the alert.")
    webhook: str = Field(description="http(s) URL the alert is POSTed to (a Slack incoming webhook or any receiver).")
    format: Literal["slack", "json"] = Field("slack", description="Slack-compatible {text, blocks} or plain JSON.")
    events: list[str] = Field(default_factory=list, description="Event kinds to send (empty: every kind).")
    min_severity: Literal["ok", "warning", "critical", "severe"] = Field(
        "warning", description="Only events at least this severe."
    )
    cooldown_seconds: int = Field(
        600,
        description="The same problem (event kind on one series of one run) pages at "
        "most once per this many seconds; later ones are logged as "
        "suppressed.",
    )


class AlertRuleRead(BaseModel):
    id: int
    project: str
    webhook: str
    format: str
    events: list[str]
    min_severity: str
    cooldown_seconds: int
    created_at: datetime
    created_by: str | None


class AlertDeliveryRead(BaseModel):
    id: int
    rule_id: int | None
    run_id: int | None
    project: str
    status: Literal["pending", "sending", "sent", "failed", "suppressed"]
    attempts: int
    last_error: str | None
    created_at: datetime
    sent_at: datetime | None
    event: dict[str, Any] = Field(description="The early-warning event as sent.")
