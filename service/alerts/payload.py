"""Webhook bodies: Slack-compatible `{"text", "blocks"}` (Block Kit, https://api.slack.com/block-kit) or plain JSON."""

from __future__ import annotations

from typing import Any

_ICONS = {"warning": ":warning:", "critical": ":rotating_light:", "severe": ":fire:"}


def body(format: str, event: dict[str, Any], run: dict[str, Any] | None, dashboard_url: str | None) -> dict[str, Any]:
    if format == "json":
        return {"source": "fp8-policy", "event": event, "run": run}
    name = (run or {}).get("name") or f"run {event.get('run_id')}"
    project = (run or {}).get("project", "")
    link = f"{dashboard_url.rstrip('/')}/#/runs/{event.get('run_id')}" if dashboard_url else None
    title = f"{_ICONS.get(event.get('severity', ''), '')} fp8-policy {event.get('severity')}: {event.get('kind')}"
    text = f"{title} in {project}/{name} at iteration {event.get('iteration')}: {event.get('message')}"
    fields = [
        f"*Layer* {event.get('layer')}",
        f"*Tensor* {event.get('tensor')} {event.get('stat')}",
        f"*Rank* {event.get('rank')}",
        f"*Iteration* {event.get('iteration')}",
    ]
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{title.strip()}* — {project}/{name}"}},
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": str(event.get("message", ""))},
            "fields": [{"type": "mrkdwn", "text": f} for f in fields],
        },
    ]
    if link:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"<{link}|Open the run>"}]})
    return {"text": text.strip(), "blocks": blocks}
