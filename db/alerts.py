"""All SQL of alerts (db/alert_models.py): rules, deliveries queued with an event, claimed and settled by senders."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import func, or_, select, update

from fp8_policy.db.alert_models import AlertDelivery, AlertRule
from fp8_policy.db.runs import utcnow
from fp8_policy.db.session import Repository, rows_affected

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Record = TypeVar("Record", bound="DataclassInstance")


@dataclass(frozen=True, slots=True)
class NewRule:
    """What a rule is stored with (AlertRepository.add_rule); its id and creation time come with the insert."""

    project: str
    webhook_url: str
    format: str
    events: list[str]
    min_severity: str
    cooldown_seconds: int
    created_by: str | None


@dataclass(frozen=True, slots=True)
class RuleRecord(NewRule):
    """A stored rule: what it was stored with, its id and its creation time."""

    id: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    id: int
    rule_id: int | None
    run_id: int | None
    project: str
    event: dict[str, Any]
    status: str
    attempts: int
    last_error: str | None
    created_at: datetime
    sent_at: datetime | None


@dataclass(frozen=True, slots=True)
class ClaimedDelivery:
    id: int
    attempts: int
    event: dict[str, Any]
    webhook_url: str | None
    format: str | None


def _record(kind: type[Record], row: object, **converted: object) -> Record:
    """`kind` (a record dataclass) filled from the ORM row's attributes of the same names, `converted` replacing
    those that need a plain copy (JSON columns)."""
    return kind(**{field.name: getattr(row, field.name) for field in fields(kind)} | converted)


def _rule(row: AlertRule) -> RuleRecord:
    return _record(RuleRecord, row, events=list(row.events or []))


def _delivery(row: AlertDelivery) -> DeliveryRecord:
    return _record(DeliveryRecord, row, event=dict(row.event))


class AlertRepository(Repository):
    # --- rules --------------------------------------------------------------------------------
    def add_rule(self, rule: NewRule) -> RuleRecord:
        row = AlertRule(**asdict(rule), created_at=utcnow())  # NewRule's fields are columns of the same names
        self.session.add(row)
        self.session.flush()
        return _rule(row)

    def rules(self, project: str | None = None) -> list[RuleRecord]:
        query = select(AlertRule).order_by(AlertRule.id)
        if project is not None:
            query = query.where(AlertRule.project == project)
        return [_rule(row) for row in self.session.scalars(query)]

    def remove_rule(self, rule_id: int) -> bool:
        row = self.session.get(AlertRule, rule_id)
        if row is None:
            return False
        self.session.delete(row)
        return True

    # --- deliveries ---------------------------------------------------------------------------
    def recently_sent(self, rule_id: int, dedupe_key: str, since: datetime) -> bool:
        """A delivery of the same episode for this rule was created after `since` (cooldown)."""
        return (
            self.session.scalar(
                select(AlertDelivery.id)
                .where(
                    AlertDelivery.rule_id == rule_id,
                    AlertDelivery.dedupe_key == dedupe_key,
                    AlertDelivery.created_at > since,
                )
                .limit(1)
            )
            is not None
        )

    def enqueue(
        self,
        *,
        rule_id: int,
        run_id: int,
        project: str,
        event_id: int | None,
        event: dict[str, Any],
        dedupe_key: str,
        suppressed: bool,
    ) -> int:
        now = utcnow()
        row = AlertDelivery(
            rule_id=rule_id,
            run_id=run_id,
            project=project,
            event_id=event_id,
            event=event,
            dedupe_key=dedupe_key,
            status="suppressed" if suppressed else "pending",
            attempts=0,
            next_attempt_at=now,
            created_at=now,
        )
        self.session.add(row)
        self.session.flush()
        return row.id

    def claim(self, owner_lease_seconds: float, limit: int = 20) -> list[ClaimedDelivery]:
        """Pending deliveries that are due (or `sending` ones whose sender died), leased to the caller.

        Taken round-robin over (rule, run) streams: first the oldest due delivery of every stream, then the
        second of each, ... So a noisy run (cooldown 0, thousands queued) gets one slot per round like any
        other, and another run's alert waits at most for the streams ahead of it, not for the noisy backlog.
        """
        now = utcnow()
        due = or_(
            (AlertDelivery.status == "pending") & (AlertDelivery.next_attempt_at <= now),
            (AlertDelivery.status == "sending") & (AlertDelivery.lease_until < now),
        )
        turn = (
            func.row_number()
            .over(partition_by=(AlertDelivery.rule_id, AlertDelivery.run_id), order_by=AlertDelivery.id)
            .label("turn")
        )
        ranked = select(AlertDelivery.id, turn).where(due).subquery()
        order = list(
            self.session.scalars(
                select(ranked.c.id).where(ranked.c.turn <= limit).order_by(ranked.c.turn, ranked.c.id).limit(limit)
            )
        )
        # PostgreSQL allows no FOR UPDATE next to a window function: lock the chosen rows in a second statement
        # (skipping those another sender holds) and keep the round-robin order.
        free = set(
            self.session.scalars(
                select(AlertDelivery.id).where(AlertDelivery.id.in_(order)).with_for_update(skip_locked=True)
            )
        )
        ids = [delivery_id for delivery_id in order if delivery_id in free]
        claimed = []
        for delivery_id in ids:
            taken = rows_affected(
                self.session.execute(
                    update(AlertDelivery)
                    .where(AlertDelivery.id == delivery_id, due)
                    .values(status="sending", lease_until=now + timedelta(seconds=owner_lease_seconds))
                )
            )
            if not taken:
                continue
            row = self.session.get(AlertDelivery, delivery_id)
            if row is None:
                continue
            rule = self.session.get(AlertRule, row.rule_id) if row.rule_id is not None else None
            claimed.append(
                ClaimedDelivery(
                    row.id,
                    row.attempts,
                    dict(row.event),
                    rule.webhook_url if rule else None,
                    rule.format if rule else None,
                )
            )
        return claimed

    def settle(self, delivery_id: int, *, ok: bool, error: str | None, retry_in: float | None) -> None:
        """Record one attempt: sent, or failed (retried after `retry_in` seconds, or given up when None)."""
        now = utcnow()
        row = self.session.get(AlertDelivery, delivery_id)
        if row is None:
            return
        row.attempts += 1
        row.lease_until = None
        if ok:
            row.status, row.sent_at, row.last_error = "sent", now, None
        elif retry_in is not None:
            row.status, row.last_error, row.next_attempt_at = "pending", error, now + timedelta(seconds=retry_in)
        else:
            row.status, row.last_error = "failed", error

    def log(self, *, project: str | None = None, run_id: int | None = None, limit: int = 200) -> list[DeliveryRecord]:
        query = select(AlertDelivery).order_by(AlertDelivery.id.desc()).limit(limit)
        if project is not None:
            query = query.where(AlertDelivery.project == project)
        if run_id is not None:
            query = query.where(AlertDelivery.run_id == run_id)
        return [_delivery(row) for row in self.session.scalars(query)]
