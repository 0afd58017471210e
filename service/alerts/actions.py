"""Alert rules and queuing: which early-warning events of a run page which webhooks.

Belongs here: validating a rule, matching events against a project's rules (event kinds, minimum severity), the
episode key and cooldown that keep one problem from paging twice, and queuing the deliveries in the transaction
that stored the events. Sending is service/alerts/sender.py's; SQL is db/alerts.py's.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from sqlalchemy.orm import Session

from fp8_policy.db.alerts import AlertRepository, DeliveryRecord, NewRule, RuleRecord
from fp8_policy.db.live import StoredEvent
from fp8_policy.db.runs import utcnow
from fp8_policy.policy.thresholds import Severity
from fp8_policy.policy.vocabulary import EVENT_KINDS
from fp8_policy.service import limits
from fp8_policy.service.alerts.targets import parse_webhook
from fp8_policy.service.errors import InvalidAlertRule, NotFound

ALL_EVENT_KINDS = EVENT_KINDS  # every kind a live run raises (policy/vocabulary.py: statistics, scalars, schedule)
FORMATS = ("slack", "json")
MAX_COOLDOWN_SECONDS = 7 * 24 * 3600


def add_rule(session: Session, rule: NewRule, *, allow_private: bool = False) -> RuleRecord:
    """Every field is checked before anything is stored (400 `InvalidWebhook` / `InvalidAlertRule`): the webhook
    as the sender will parse it and where it points (service/alerts/targets.py), the project with the limits of
    a run's project (no NUL or control characters, valid UTF-8: both databases store it alike)."""
    rule = replace(
        rule, project=limits.check_label("project", rule.project, limits.MAX_NAME_CHARS, error=InvalidAlertRule)
    )
    if not rule.project:
        raise InvalidAlertRule(f"project must be 1..{limits.MAX_NAME_CHARS} characters")
    parse_webhook(rule.webhook_url, allow_private=allow_private)
    if rule.format not in FORMATS:
        raise InvalidAlertRule(f"format must be one of {', '.join(FORMATS)}")
    unknown = sorted(set(rule.events) - set(ALL_EVENT_KINDS))
    if unknown:
        raise InvalidAlertRule(
            f"unknown event kinds {', '.join(unknown)}; expected some of {', '.join(ALL_EVENT_KINDS)}",
        )
    if rule.min_severity not in [s.value for s in Severity]:
        raise InvalidAlertRule("min_severity must be ok, warning, critical or severe")
    if not 0 <= rule.cooldown_seconds <= MAX_COOLDOWN_SECONDS:
        raise InvalidAlertRule(f"cooldown_seconds must be 0..{MAX_COOLDOWN_SECONDS}")
    return AlertRepository(session).add_rule(replace(rule, events=sorted(set(rule.events))))


def remove_rule(session: Session, rule_id: int) -> None:
    if not AlertRepository(session).remove_rule(rule_id):
        raise NotFound(f"alert rule {rule_id} not found")


def rules(session: Session, project: str | None) -> list[RuleRecord]:
    """Every alert rule, or one project's."""
    return AlertRepository(session).rules(project)


def delivery_log(session: Session, project: str | None, run_id: int | None, limit: int) -> list[DeliveryRecord]:
    """Alerts raised (sent, pending, failed, suppressed), newest first, at most `limit`."""
    return AlertRepository(session).log(project=project, run_id=run_id, limit=limit)


def episode_key(run_id: int, event: dict[str, Any]) -> str:
    """One problem: the same event kind on the same series of the same run."""
    return "|".join(str(event.get(k)) for k in ("kind", "layer", "tensor", "stat", "rank")) + f"|run={run_id}"


def queue_for_events(session: Session, run_id: int, project: str, events: list[StoredEvent]) -> int:
    """Queue a delivery per (matching rule, event); within a rule's cooldown the episode is logged as suppressed.
    Returns how many deliveries are pending (to wake the sender)."""
    repo = AlertRepository(session)
    rules = repo.rules(project)
    pending = 0
    for stored in events:
        event = {"id": stored.id, "run_id": run_id, **stored.event.to_dict()}
        for rule in rules:
            if rule.events and event["kind"] not in rule.events:
                continue
            if Severity(event["severity"]) < Severity(rule.min_severity):
                continue
            key = episode_key(run_id, event)
            since = utcnow() - timedelta(seconds=rule.cooldown_seconds)
            suppressed = rule.cooldown_seconds > 0 and repo.recently_sent(rule.id, key, since)
            repo.enqueue(
                rule_id=rule.id,
                run_id=run_id,
                project=project,
                event_id=stored.id,
                event=event,
                dedupe_key=key,
                suppressed=suppressed,
            )
            pending += 0 if suppressed else 1
    return pending
