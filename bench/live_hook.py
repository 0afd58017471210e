"""bench/live.py's loopback webhook: a receiver that records when each alert arrived, and which planted crossing
each arrival answers.

Belongs here: the receiving side of the alert-latency figure; the service, the writer and the figures stay in
bench/live.py.
"""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver(BaseHTTPRequestHandler):
    """Loopback webhook: records when each alert arrived and its body."""

    calls: list[tuple[float, dict[str, Any]]]

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        arrived = time.perf_counter()
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            payload = json.loads(body)
        except ValueError:
            payload = {}
        self.server.calls.append((arrived, payload))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_args: Any) -> None:
        pass


def planted_arrivals(receiver: ThreadingHTTPServer, planted: dict[str, tuple[int, float]]) -> dict[str, float]:
    """When the first webhook naming each planted layer at its planted iteration arrived."""
    found: dict[str, float] = {}
    for arrived, payload in list(receiver.calls):  # type: ignore[attr-defined]
        event = payload.get("event") or {}
        for layer, (iteration, _at) in planted.items():
            if event.get("iteration") == iteration and layer.startswith(f"{event.get('layer')}_gradient_"):
                found.setdefault(layer, arrived)
    return found
