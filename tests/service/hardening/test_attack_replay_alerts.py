"""Attack replay, alerts (SQLite and PostgreSQL): what once went wrong when the service was attacked through its alert
rules and webhooks, replayed against the running app.

* A webhook the sender cannot parse (`http://127.0.0.1:abc/`) was accepted, and its delivery's exception aborted the
  whole claimed batch: another project's alert stayed `sending`. Now refused at creation, and a stored bad rule
  fails only its own delivery.
* Link-local / metadata, loopback and private targets were accepted. Now link-local and metadata addresses are
  always refused, loopback and private ones unless FP8_POLICY_WEBHOOK_ALLOW_PRIVATE=1, at creation and again at
  send time after DNS resolution (the request goes to the address that was checked).
* A webhook's response body reached every read token through /alerts/log: now only a status line.
* A rule whose project held a lone surrogate or NUL answered 500: now 400.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from fp8_policy.db.alert_models import AlertDelivery
from fp8_policy.db.alerts import AlertRepository, NewRule
from fp8_policy.db.runs import NewRun, RunRepository
from fp8_policy.db.session import create_session_factory, session_scope
from fp8_policy.service.alerts import targets
from fp8_policy.service.alerts.sender import AlertSender
from fp8_policy.service.alerts.targets import RefusedTarget, pinned
from fp8_policy.service.settings import Settings

RULES = "/api/v1/alerts/rules"
LOG = "/api/v1/alerts/log"
METADATA_TARGETS = [
    "http://169.254.169.254/latest/meta-data/",
    "http://169.254.170.2/v2/credentials",
    "http://[fe80::1]/hook",
    "http://[fd00:ec2::254]/latest/meta-data/",
    "http://[::ffff:169.254.169.254]/",
    "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of 169.254.169.254
]
PRIVATE_TARGETS = [
    "http://127.0.0.1:9/hook",
    "http://localhost:8080/hook",
    "http://10.1.2.3/hook",
    "http://192.168.0.10/hook",
    "http://[::1]:9/hook",
    "http://[fc00::1]/hook",
]


@pytest.fixture
def open_client(make_client) -> TestClient:
    """The service as a team with an internal chat proxy runs it: FP8_POLICY_WEBHOOK_ALLOW_PRIVATE=1."""
    return make_client(webhook_allow_private=True)


def rule(client: TestClient, project: str, webhook: str, **fields):
    # json.dumps writes ASCII: a lone surrogate goes as its JSON escape (httpx's json= cannot encode it)
    body = json.dumps({"project": project, "webhook": webhook, **fields})
    return client.post(RULES, content=body, headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("webhook", ["http://127.0.0.1:abc/", "http://example.com:0/", "http://example.com:70000/"])
def test_a_webhook_the_sender_cannot_use_is_refused_at_creation(open_client: TestClient, project: str, webhook) -> None:
    response = rule(open_client, project, webhook)

    assert response.status_code == 400 and response.json()["error"] == "InvalidWebhook", response.text
    assert open_client.get(RULES, params={"project": project}).json() == []


@pytest.mark.parametrize("webhook", METADATA_TARGETS)
def test_link_local_and_metadata_targets_are_always_refused(open_client: TestClient, project: str, webhook) -> None:
    response = rule(open_client, project, webhook)

    assert response.status_code == 400 and response.json()["error"] == "InvalidWebhook", response.text
    assert "link-local" in response.json()["detail"]


@pytest.mark.parametrize("webhook", PRIVATE_TARGETS)
def test_private_targets_need_the_setting(client: TestClient, open_client: TestClient, project: str, webhook) -> None:
    refused = rule(client, project, webhook)
    assert refused.status_code == 400 and "FP8_POLICY_WEBHOOK_ALLOW_PRIVATE" in refused.json()["detail"]

    assert rule(open_client, project, webhook).status_code == 201


def test_the_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("FP8_POLICY_WEBHOOK_ALLOW_PRIVATE", "1")
    assert Settings(_env_file=None, data_dir=tmp_path).webhook_allow_private is True
    monkeypatch.delenv("FP8_POLICY_WEBHOOK_ALLOW_PRIVATE")
    assert Settings(_env_file=None, data_dir=tmp_path).webhook_allow_private is False


@pytest.mark.parametrize("bad", ["\ud800", "a\x00b", "tab\there", "x" * 201])
def test_a_project_no_database_can_store_is_400(open_client: TestClient, bad: str) -> None:
    response = rule(open_client, bad, "http://127.0.0.1:9/hook")

    assert response.status_code == 400 and response.json()["error"] == "InvalidAlertRule", response.text


@pytest.mark.parametrize(
    ("webhook", "resolved", "allow_private"),
    [
        ("http://hooks.example/x", ["169.254.169.254"], True),  # rebinding to the metadata service
        ("http://hooks.example/x", ["203.0.113.7", "10.0.0.5"], False),  # one private record refuses the name
        ("http://hooks.example/x", ["127.0.0.1"], False),
        ("http://127.0.0.1:abc/", [], True),  # a rule stored before creation was checked
    ],
)
def test_send_time_checks_the_resolved_addresses(webhook: str, resolved: list[str], allow_private: bool) -> None:
    with pytest.raises(RefusedTarget):
        pinned(webhook, allow_private=allow_private, resolver=lambda _host, _port: resolved)


def test_the_request_goes_to_the_address_that_was_checked() -> None:
    target = pinned("https://hooks.example:8443/services/T/B", allow_private=False, resolver=lambda *_: ["8.8.4.4"])

    assert str(target.url) == "https://8.8.4.4:8443/services/T/B"
    assert target.headers == {"Host": "hooks.example:8443"} and target.extensions == {"sni_hostname": "hooks.example"}


def queue(factory, project: str, webhook: str, count: int = 1) -> int:
    """A run of `project` with `count` deliveries queued for a rule to `webhook` (stored behind the API's back,
    as a rule stored before the checks existed would be); returns the run id."""
    with session_scope(factory) as session:
        run = RunRepository(session).add(NewRun("r", project, (), {}, project[:64].ljust(64, "0"), None, 0, ""))
        alerts = AlertRepository(session)
        stored = alerts.add_rule(
            NewRule(
                project=project,
                webhook_url=webhook,
                format="json",
                events=[],
                min_severity="ok",
                cooldown_seconds=0,
                created_by=None,
            )
        )
        for number in range(count):
            alerts.enqueue(
                rule_id=stored.id,
                run_id=run.id,
                project=project,
                event_id=None,
                event={"run_id": run.id, "kind": "band_crossing", "severity": "critical", "number": number},
                dedupe_key=f"{run.id}:{number}",
                suppressed=False,
            )
        return run.id


def log_when(factory, run_id: int, done, timeout: float = 20.0) -> list:
    """The run's alert log once `done(log)` holds (or the timeout passed)."""
    deadline = time.monotonic() + timeout
    while True:
        with session_scope(factory) as session:
            log = AlertRepository(session).log(run_id=run_id)
        if done(log) or time.monotonic() > deadline:
            return log
        time.sleep(0.02)


def settled(log: list) -> bool:
    return all(d.status not in ("pending", "sending") for d in log)


def attempted(log: list) -> bool:
    return all(d.attempts for d in log)


@pytest.fixture
def factory(db_engine, project: str) -> Iterator[sessionmaker[Session]]:
    """Sessions on the shared test database; this test's deliveries still pending at the end are given up, so no
    other test's app sends them."""
    factory = create_session_factory(db_engine)
    yield factory
    with session_scope(factory) as session:
        session.execute(
            update(AlertDelivery)
            .where(AlertDelivery.project.startswith(project), AlertDelivery.status.in_(("pending", "sending")))
            .values(status="failed")
        )


def test_a_delivery_that_raises_fails_alone_and_never_blocks_another_project(factory, project: str) -> None:
    bad_run = queue(factory, f"{project}-bad", "http://127.0.0.1:abc/", count=3)
    rebinding_run = queue(factory, f"{project}-rebind", f"http://{project}.example/hook")
    crashing_run = queue(factory, f"{project}-crash", f"http://{project}-crash.example/hook")
    good_run = queue(factory, f"{project}-good", f"http://{project}-good.example/hook")
    posted: list[tuple[str, str]] = []

    def resolve(host: str, _port: int) -> list[str]:
        if host == f"{project}-crash.example":
            raise RuntimeError("a bug anywhere in one delivery")
        return ["169.254.169.254"] if host == f"{project}.example" else ["93.184.215.14"]

    def receive(request: httpx.Request) -> httpx.Response:
        posted.append((request.url.host, request.headers["host"]))
        return httpx.Response(200, text="SECRET-TOKEN " * 50)

    sender = AlertSender(factory, poll_seconds=3600, transport=httpx.MockTransport(receive), resolver=resolve)
    try:
        good = log_when(factory, good_run, settled)
        bad = log_when(factory, bad_run, settled)
        rebound = log_when(factory, rebinding_run, settled)
        crashed = log_when(factory, crashing_run, attempted)
    finally:
        sender.stop()

    assert [(d.status, d.attempts) for d in good] == [("sent", 1)]
    mine = [(address, host) for address, host in posted if project in host]  # the database is shared by tests
    assert mine == [("93.184.215.14", f"{project}-good.example")]  # only the checked address was reached
    assert [(d.status, d.attempts) for d in bad] == [("failed", 1)] * 3  # refused at once, not retried
    assert [(d.status, d.attempts) for d in rebound] == [("failed", 1)]
    assert "link-local" in rebound[0].last_error
    assert crashed[0].attempts >= 1 and crashed[0].status in ("pending", "sending", "failed")  # retried on its own
    assert crashed[0].last_error == "RuntimeError: unexpected error; see the service log"


def test_the_alert_log_shows_a_status_line_never_the_response(factory, project: str) -> None:
    run_id = queue(factory, project, f"http://{project}.example/hook")

    def receive(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, text="internal token=SECRET-TOKEN", extensions={"reason_phrase": b"SECRET-REASON"})

    sender = AlertSender(
        factory, poll_seconds=3600, transport=httpx.MockTransport(receive), resolver=lambda *_: ["93.184.215.14"]
    )
    try:
        log = log_when(factory, run_id, attempted)
    finally:
        sender.stop()

    assert log[0].last_error == "HTTP 500 Internal Server Error"


def test_a_name_that_resolves_slowly_delays_only_its_own_delivery(monkeypatch: pytest.MonkeyPatch) -> None:
    released = threading.Event()

    def slow_getaddrinfo(*_args: object, **_kwargs: object) -> list:
        released.wait(5)
        return []

    monkeypatch.setattr(targets, "RESOLVE_SECONDS", 0.1)
    monkeypatch.setattr(targets.socket, "getaddrinfo", slow_getaddrinfo)
    started = time.monotonic()
    try:
        with pytest.raises(TimeoutError):
            pinned("http://slow.example/hook", allow_private=False)
    finally:
        released.set()
    assert time.monotonic() - started < 2
