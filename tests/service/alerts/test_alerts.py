"""Alert rules and webhook delivery: validation, matching, Slack and JSON bodies, retries, cooldown, the log."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from fp8_policy.db.alert_models import AlertDelivery
from fp8_policy.db.alerts import AlertRepository, NewRule
from fp8_policy.db.runs import NewRun, RunRepository
from fp8_policy.db.session import create_session_factory, session_scope
from fp8_policy.service.alerts.sender import AlertSender
from fp8_policy.service.settings import Settings
from tests.service.live.test_live_runs import LAYERS, create, put, training_log
from tests.support.archives import stats_relpath
from tests.support.webhook import webhook_receiver

RULES = "/api/v1/alerts/rules"
LOG = "/api/v1/alerts/log"


@pytest.fixture
def app_settings(app_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The receivers of these tests listen on 127.0.0.1: the service runs with FP8_POLICY_WEBHOOK_ALLOW_PRIVATE=1
    (without it a loopback webhook is refused: tests/service/hardening/test_attack_replay_alerts.py)."""
    monkeypatch.setenv("FP8_POLICY_WEBHOOK_ALLOW_PRIVATE", "1")
    return Settings(_env_file=None, data_dir=app_settings.data_dir, database_url=app_settings.database_url)


def add_rule(client: TestClient, project: str, webhook: str, **fields) -> dict:
    response = client.post(RULES, json={"project": project, "webhook": webhook, **fields})
    assert response.status_code == 201, response.text
    return response.json()


def feed_training_log(client: TestClient, project: str) -> dict:
    run = create(client, project)
    data = training_log(0)
    response = put(client, run["id"], stats_relpath(0), 0, data)
    assert response.status_code == 200, response.text
    return {"run": run, "events": response.json()["events"]}


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"webhook": "ftp://x/y"}, "InvalidWebhook"),
        ({"webhook": "http:///nohost"}, "InvalidWebhook"),
        ({"webhook": "http://127.0.0.1/x", "events": ["nope"]}, "InvalidAlertRule"),
        ({"webhook": "http://127.0.0.1/x", "cooldown_seconds": -1}, "InvalidAlertRule"),
    ],
)
def test_invalid_rules_are_400(client: TestClient, project: str, body: dict, error: str) -> None:
    response = client.post(RULES, json={"project": project, **body})

    assert response.status_code == 400 and response.json()["error"] == error


def test_rules_are_listed_and_removed(client: TestClient, project: str) -> None:
    rule = add_rule(client, project, "http://127.0.0.1:9/x", events=["band_crossing"], min_severity="critical")

    listed = client.get(RULES, params={"project": project}).json()
    assert [(r["id"], r["events"], r["min_severity"]) for r in listed] == [(rule["id"], ["band_crossing"], "critical")]
    assert client.delete(f"{RULES}/{rule['id']}").status_code == 204
    assert client.get(RULES, params={"project": project}).json() == []
    assert client.delete(f"{RULES}/{rule['id']}").status_code == 404


def test_matching_events_reach_the_webhook_as_slack_blocks(client: TestClient, project: str) -> None:
    with webhook_receiver() as receiver:
        add_rule(client, project, receiver.url, events=["scale_inv_drop", "band_crossing"], min_severity="critical")
        fed = feed_training_log(client, project)
        wanted = [
            e
            for e in fed["events"]
            if e["kind"] in ("scale_inv_drop", "band_crossing") and e["severity"] in ("critical", "severe")
        ]
        calls = receiver.wait_for(len(wanted))

    bodies = [body for _t, _path, body in calls]
    assert all(set(b) == {"text", "blocks"} for b in bodies)
    assert any("scale_inv_drop" in b["text"] and LAYERS[0] in b["blocks"][1]["fields"][0]["text"] for b in bodies)
    log = client.get(LOG, params={"run_id": fed["run"]["id"]}).json()
    assert sorted(e["status"] for e in log) == ["sent"] * len(wanted)
    assert {e["event"]["kind"] for e in log} == {"scale_inv_drop", "band_crossing"}


def test_json_format_and_other_projects_rules_stay_quiet(client: TestClient, project: str) -> None:
    with webhook_receiver() as mine, webhook_receiver() as other:
        add_rule(client, project, mine.url, format="json", events=["scale_inv_drop"])
        add_rule(client, f"{project}-other", other.url)
        fed = feed_training_log(client, project)
        calls = mine.wait_for(1)

    body = calls[0][2]
    assert body["source"] == "fp8-policy" and body["event"]["kind"] == "scale_inv_drop"
    assert body["run"] == {"id": fed["run"]["id"], "name": "live-test", "project": project}
    assert other.calls == []


def test_a_failing_receiver_is_retried_with_backoff(client: TestClient, project: str) -> None:
    with webhook_receiver(fail_first=2) as receiver:
        add_rule(client, project, receiver.url, format="json", events=["scale_inv_drop"])
        fed = feed_training_log(client, project)
        receiver.wait_for(1, timeout=30)

    entry = client.get(LOG, params={"run_id": fed["run"]["id"]}).json()[0]
    assert entry["status"] == "sent" and entry["attempts"] == 3 and receiver.attempts == 3


def test_the_same_problem_within_the_cooldown_is_logged_as_suppressed(client: TestClient, project: str) -> None:
    with webhook_receiver() as receiver:
        add_rule(client, project, receiver.url, format="json", events=["nonfinite"], cooldown_seconds=3600)
        run = create(client, project)
        path = stats_relpath(0)
        name = f"{LAYERS[0]}_gradient_underflows%"
        lines = [
            f"2026-01-01 00:00:00,000 - INFO - {name} \t\t\t\t iteration={it:06d} \t\t\t\t value={v}\n"
            for it, v in ((0, "0.1"), (10, "nan"), (20, "0.1"), (30, "nan"))
        ]
        offset = 0
        for line in lines:
            offset = put(client, run["id"], path, offset, line.encode()).json()["size"]
        receiver.wait_for(1)

    log = client.get(LOG, params={"run_id": run["id"]}).json()
    assert sorted(e["status"] for e in log) == ["sent", "suppressed"]
    assert len(receiver.calls) == 1


def test_a_noisy_run_does_not_hold_back_another_runs_alert(db_engine, project: str) -> None:
    """300 deliveries queued by a noisy run (cooldown 0) ahead of one from a quiet run: the quiet one goes out
    in the first round, after at most one of the noisy ones, not after the whole backlog (the sender was FIFO)."""
    factory = create_session_factory(db_engine)
    with session_scope(factory) as session:
        runs = RunRepository(session)
        noisy_run, quiet_run = (
            runs.add(NewRun(name, project, (), {}, name[0] * 64, None, 0, "")).id for name in ("noisy", "quiet")
        )
        alerts = AlertRepository(session)
        rule = alerts.add_rule(
            NewRule(
                project=project,
                webhook_url=f"http://{project}.test/hook",
                format="json",
                events=[],
                min_severity="info",
                cooldown_seconds=0,
                created_by=None,
            )
        )
        for number, run_id in [*((n, noisy_run) for n in range(300)), (0, quiet_run)]:
            event = {"run_id": run_id, "kind": "band_crossing", "number": number}
            alerts.enqueue(
                rule_id=rule.id,
                run_id=run_id,
                project=project,
                event_id=None,
                event=event,
                dedupe_key=f"{run_id}:{number}",
                suppressed=False,
            )
    posted: list[int] = []

    def receive(request: httpx.Request) -> httpx.Response:
        if request.headers["host"] == f"{project}.test":  # sent to the address resolved below, named in Host
            posted.append(json.loads(request.content)["event"]["run_id"])
        return httpx.Response(204)

    sender = AlertSender(  # one thread posts
        factory, poll_seconds=3600, transport=httpx.MockTransport(receive), resolver=lambda *_: ["93.184.215.14"]
    )
    try:
        deadline = time.monotonic() + 30
        while quiet_run not in posted and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        sender.stop()
        with session_scope(factory) as session:  # the backlog left is given up: no other test's app sends it
            session.execute(
                update(AlertDelivery)
                .where(AlertDelivery.project == project, AlertDelivery.status.in_(("pending", "sending")))
                .values(status="failed")
            )

    assert quiet_run in posted and posted.index(quiet_run) <= 1, posted[:5]
