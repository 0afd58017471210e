"""Deliver queued alerts: one background thread per API process claims due deliveries (with a lease, so a dead
sender's deliveries are taken over), POSTs them and records each attempt; failures are retried with exponential
backoff (1, 2, 4, 8, 16 s) and then given up, all visible in the alert log. Due deliveries are claimed
round-robin per (rule, run) (AlertRepository.claim), so a noisy run's backlog cannot hold back another run's alert.

Each delivery is resolved and checked again before it is sent (service/alerts/targets.py: no link-local or metadata
address, no loopback or private one unless allowed) and POSTed to the address that was checked, redirects not
followed. Whatever one delivery raises is recorded as that delivery's failed attempt; the alert log keeps a status
line or the kind of failure, never the receiver's answer or an exception's text."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session, sessionmaker

from fp8_policy.db.alerts import AlertRepository, ClaimedDelivery
from fp8_policy.db.runs import RunRepository
from fp8_policy.db.session import session_scope
from fp8_policy.service.alerts.payload import body
from fp8_policy.service.alerts.targets import RefusedTarget, Resolver, pinned, system_resolver

if TYPE_CHECKING:  # imported with the first delivery, not when the service starts (issue 21)
    import httpx

log = logging.getLogger("fp8_policy.alerts")
BACKOFF_SECONDS = (1.0, 2.0, 4.0, 8.0, 16.0)
LEASE_SECONDS = 30.0
TIMEOUT_SECONDS = 5.0


class AlertSender:
    def __init__(
        self,
        factory: sessionmaker[Session],
        *,
        poll_seconds: float = 1.0,
        dashboard_url: str | None = None,
        transport: httpx.BaseTransport | None = None,
        allow_private: bool = False,
        resolver: Resolver = system_resolver,
    ) -> None:
        self.factory = factory
        self.poll_seconds = poll_seconds
        self.dashboard_url = dashboard_url
        self.allow_private = allow_private  # FP8_POLICY_WEBHOOK_ALLOW_PRIVATE (service/alerts/targets.py)
        self.resolver = resolver
        self._transport = transport
        self._http: httpx.Client | None = None  # made by the first delivery (`_client`)
        self._http_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="alerts", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=TIMEOUT_SECONDS + 5)
        with self._http_lock:
            if self._http is not None:
                self._http.close()

    def _client(self) -> httpx.Client:
        with self._http_lock:
            if self._http is None:
                import httpx

                # No redirects: a 3xx would lead the request to a target that was never checked.
                self._http = httpx.Client(
                    timeout=TIMEOUT_SECONDS,
                    transport=self._transport,
                    headers={"User-Agent": "fp8-policy-alerts"},
                    follow_redirects=False,
                )
            return self._http

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                while self.send_due() and not self._stop.is_set():
                    pass
            except Exception:  # database down, ...: try again on the next tick
                log.exception("alert delivery pass failed")
            self._wake.wait(self.poll_seconds)
            self._wake.clear()

    def send_due(self) -> int:
        """One pass: claim what is due and send it; returns how many were attempted. Each delivery is settled on
        its own: whatever one of them raises, the others of the batch are still sent."""
        with session_scope(self.factory) as session:
            claimed = AlertRepository(session).claim(LEASE_SECONDS)
        for delivery in claimed:
            try:
                self._send(delivery)
            except Exception:  # not even settled (database down): its lease runs out and it is claimed again
                log.exception("alert %s: the attempt could not be recorded", delivery.id)
        return len(claimed)

    def _send(self, delivery: ClaimedDelivery) -> None:
        ok, error, final = False, None, False
        if delivery.webhook_url is None:
            error, final = "the rule was removed before the alert was sent", True
        else:
            try:
                ok, error = self._post(delivery)
            except RefusedTarget as exc:  # where the webhook points now is not allowed: retrying changes nothing
                error, final = str(exc), True
            except Exception as exc:  # any failure of this one delivery (bad URL, DNS, connection, bug) is its own
                error = _describe(exc)
        retry_in = None
        if not ok and not final and delivery.attempts < len(BACKOFF_SECONDS):
            retry_in = BACKOFF_SECONDS[delivery.attempts]
        with session_scope(self.factory) as session:
            AlertRepository(session).settle(delivery.id, ok=ok, error=error, retry_in=retry_in)
        if not ok:
            log.warning("alert %s not delivered (attempt %s): %s", delivery.id, delivery.attempts + 1, error)

    def _post(self, delivery: ClaimedDelivery) -> tuple[bool, str | None]:
        """POST the alert to the checked address of its webhook. The answer is recorded as its status line only:
        the alert log is readable by every read token, the receiver's body is not theirs to see."""
        assert delivery.webhook_url is not None
        target = pinned(delivery.webhook_url, allow_private=self.allow_private, resolver=self.resolver)
        run = self._run(delivery.event.get("run_id"))
        payload = body(delivery.format or "json", delivery.event, run, self.dashboard_url)
        response = self._client().post(target.url, json=payload, headers=target.headers, extensions=target.extensions)
        if response.is_success:
            return True, None
        import httpx

        return False, f"HTTP {response.status_code} {httpx.codes.get_reason_phrase(response.status_code)}".rstrip()

    def _run(self, run_id: object) -> dict[str, object] | None:
        if not isinstance(run_id, int):
            return None
        with session_scope(self.factory) as session:
            run = RunRepository(session).get(run_id)
            return None if run is None else {"id": run.id, "name": run.name, "project": run.project}


def _describe(exc: Exception) -> str:
    """A failed attempt for the alert log: the kind of failure, never the exception's text (httpx's messages can
    quote the webhook URL, whose path is often its secret, and the log is readable by every read token)."""
    import httpx

    if isinstance(exc, httpx.TimeoutException):
        what = f"no answer within {TIMEOUT_SECONDS:g} s"
    elif isinstance(exc, httpx.ConnectError | OSError):
        what = "could not connect or resolve the webhook's host"
    elif isinstance(exc, httpx.InvalidURL | ValueError):
        what = "the webhook URL cannot be used"
    elif isinstance(exc, httpx.HTTPError):
        what = "the request failed"
    else:
        what = "unexpected error; see the service log"
        log.error("alert delivery failed unexpectedly", exc_info=exc)
    return f"{type(exc).__name__}: {what}"
