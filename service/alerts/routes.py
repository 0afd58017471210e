"""HTTP routes of alerts: rules per project (admin) and the delivery log (read)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from fp8_policy.db.alerts import DeliveryRecord, NewRule, RuleRecord
from fp8_policy.service.alerts import actions
from fp8_policy.service.alerts.schemas import AlertDeliveryRead, AlertRuleCreate, AlertRuleRead
from fp8_policy.service.auth.deps import ADMIN, READ, PrincipalDep
from fp8_policy.service.deps import SessionDep, SettingsDep
from fp8_policy.service.openapi import error_responses

router = APIRouter(prefix="/api/v1/alerts", tags=["alerts"])


def _rule_read(rule: RuleRecord) -> AlertRuleRead:
    return AlertRuleRead.model_validate({**asdict(rule), "webhook": rule.webhook_url})


def _delivery_read(delivery: DeliveryRecord) -> AlertDeliveryRead:
    return AlertDeliveryRead.model_validate(delivery, from_attributes=True)


@router.post(
    "/rules", status_code=201, response_model=AlertRuleRead, dependencies=[ADMIN], responses=error_responses(400)
)
def add_rule(
    body: AlertRuleCreate, session: SessionDep, principal: PrincipalDep, settings: SettingsDep
) -> AlertRuleRead:
    """Send the project's early-warning events (live runs) to a webhook. The webhook must be http(s) with a
    numeric port; link-local and cloud-metadata hosts are refused, loopback and private ones too unless the
    service runs with `FP8_POLICY_WEBHOOK_ALLOW_PRIVATE=1` (each delivery is checked again after DNS)."""
    fields = body.model_dump(exclude={"webhook"})  # the schema's fields but the webhook's, by their names
    new = NewRule(**fields, webhook_url=body.webhook, created_by=principal.name)
    rule = actions.add_rule(session, new, allow_private=settings.webhook_allow_private)
    return _rule_read(rule)


@router.get("/rules", response_model=list[AlertRuleRead], dependencies=[ADMIN], responses=error_responses(400))
def list_rules(
    session: SessionDep,
    project: Annotated[str | None, Query(max_length=200, description="Only this project's rules.")] = None,
) -> list[AlertRuleRead]:
    """Every alert rule (webhook URLs may hold secrets: admin only)."""
    return [_rule_read(rule) for rule in actions.rules(session, project)]


@router.delete("/rules/{rule_id}", status_code=204, dependencies=[ADMIN], responses=error_responses(400, 404))
def remove_rule(
    rule_id: Annotated[int, Path(ge=1, le=2**31 - 1, description="The rule's id (alert list).")], session: SessionDep
) -> Response:
    """Stop sending with this rule (its past deliveries stay in the log)."""
    actions.remove_rule(session, rule_id)
    return Response(status_code=204)


@router.get("/log", response_model=list[AlertDeliveryRead], dependencies=[READ], responses=error_responses(400))
def alert_log(
    session: SessionDep,
    project: Annotated[str | None, Query(max_length=200, description="Only this project's alerts.")] = None,
    run_id: Annotated[int | None, Query(ge=1, le=2**31 - 1, description="Only this run's alerts.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="Newest first, at most this many.")] = 200,
) -> list[AlertDeliveryRead]:
    """Every alert raised (sent, pending, failed after retries, or suppressed by a cooldown), newest first."""
    return [_delivery_read(d) for d in actions.delivery_log(session, project, run_id, limit)]
