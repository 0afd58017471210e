"""Deliver queued alerts: one background thread per API process claims due deliveries (with a lease, so a dead
sender's deliveries are taken over), POSTs them and records each attempt; failures are retried with exponential
backoff (1, 2, 4, 8, 16 s) and then given up, all visible in the alert log. Due deliveries are claimed
round-robin per (rule, run) (AlertRepository.claim), so a noisy run's backlog cannot hold back another run's alert."""

from __future__ import annotations

import logging
import threading

import httpx
from sqlalchemy.orm import Session, sessionmaker

from fp8_policy.db.alerts import AlertRepository, ClaimedDelivery
from fp8_policy.db.repositories import RunRepository
from fp8_policy.db.session import session_scope
from fp8_policy.service.alerts.payload import body

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
    ) -> None:
        self.factory = factory
        self.poll_seconds = poll_seconds
        self.dashboard_url = dashboard_url
        self._http = httpx.Client(
            timeout=TIMEOUT_SECONDS, transport=transport, headers={"User-Agent": "fp8-policy-alerts"}
        )
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
        self._http.close()

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
        """One pass: claim what is due and send it; returns how many were attempted."""
        with session_scope(self.factory) as session:
            claimed = AlertRepository(session).claim(LEASE_SECONDS)
        for delivery in claimed:
            self._send(delivery)
        return len(claimed)

    def _send(self, delivery: ClaimedDelivery) -> None:
        ok, error = False, None
        if delivery.webhook_url is None:
            error = "the rule was removed before the alert was sent"
        else:
            try:
                run = self._run(delivery.event.get("run_id"))
                payload = body(delivery.format or "json", delivery.event, run, self.dashboard_url)
                response = self._http.post(delivery.webhook_url, json=payload)
                ok = response.is_success
                if not ok:
                    error = f"HTTP {response.status_code}: {response.text[:200]}"
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
        retry_in = None
        if not ok and delivery.webhook_url is not None and delivery.attempts < len(BACKOFF_SECONDS):
            retry_in = BACKOFF_SECONDS[delivery.attempts]
        with session_scope(self.factory) as session:
            AlertRepository(session).settle(delivery.id, ok=ok, error=error, retry_in=retry_in)
        if not ok:
            log.warning("alert %s not delivered (attempt %s): %s", delivery.id, delivery.attempts + 1, error)

    def _run(self, run_id: object) -> dict[str, object] | None:
        if not isinstance(run_id, int):
            return None
        with session_scope(self.factory) as session:
            run = RunRepository(session).get(run_id)
            return None if run is None else {"id": run.id, "name": run.name, "project": run.project}
