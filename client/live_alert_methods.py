"""The live-run and alert endpoints' methods of `PolicyClient` (client/client.py), a base class it inherits: start a
live run, append to its files, read and finalize it; alert rules and the alert log. Same rules as client.py:
endpoint paths and parameters only, the service's JSON as plain dicts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fp8_policy.client._http import HttpSession

LIVE_RUNS = "/api/v1/live/runs"
ALERTS = "/api/v1/alerts"


class LiveAndAlertMethods:
    """Needs `_http` (set by PolicyClient.__init__)."""

    _http: HttpSession

    # ------------------------------------------------------------------------------------------------ live
    def create_live_run(
        self,
        *,
        name: str | None = None,
        project: str | None = None,
        tags: Sequence[str] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Start a live run (status `live`); its logs are then sent with `append_live` (see `LiveUploader`)."""
        body = {"name": name, "project": project or "default", "tags": list(tags), "metadata": dict(metadata or {})}
        return self._http.json_object("POST", LIVE_RUNS, json=body)

    def append_live(self, run_id: int, path: str, offset: int, data: bytes) -> dict[str, Any]:
        """Send `data` as bytes `offset..` of the live run's file `path`; returns {path, size, events}."""
        return self._http.json_object(
            "PUT",
            f"{LIVE_RUNS}/{int(run_id)}/files/{path}",
            params={"offset": offset},
            content=data,
            headers={"Content-Type": "application/octet-stream"},
        )

    def live_run(self, run_id: int, *, after: int = 0) -> dict[str, Any]:
        """A live run's received files and its early-warning events with ids above `after`."""
        return self._http.json_object("GET", f"{LIVE_RUNS}/{int(run_id)}", params={"after": after})

    # ------------------------------------------------------------------------------------------------ alerts
    def add_alert_rule(
        self,
        project: str,
        webhook: str,
        *,
        format: str = "slack",
        events: Sequence[str] = (),
        min_severity: str = "warning",
        cooldown_seconds: int = 600,
    ) -> dict[str, Any]:
        """Send `project`'s early-warning events to `webhook` (admin token)."""
        body = {
            "project": project,
            "webhook": webhook,
            "format": format,
            "events": list(events),
            "min_severity": min_severity,
            "cooldown_seconds": cooldown_seconds,
        }
        return self._http.json_object("POST", f"{ALERTS}/rules", json=body)

    def alert_rules(self, project: str | None = None) -> list[dict[str, Any]]:
        return self._http.json_list("GET", f"{ALERTS}/rules", params={"project": project})

    def remove_alert_rule(self, rule_id: int) -> None:
        self._http.request("DELETE", f"{ALERTS}/rules/{int(rule_id)}")

    def alert_log(
        self, *, project: str | None = None, run_id: int | None = None, limit: int = 200
    ) -> list[dict[str, Any]]:
        """Alerts raised (sent, pending, failed, suppressed), newest first."""
        return self._http.json_list(
            "GET", f"{ALERTS}/log", params={"project": project, "run_id": run_id, "limit": limit}
        )

    def finalize_live_run(self, run_id: int) -> dict[str, Any]:
        """Ingest what the live run received, like an upload (the run goes `queued`, then `ready` or `failed`)."""
        return self._http.json_object("POST", f"{LIVE_RUNS}/{int(run_id)}/finalize")
