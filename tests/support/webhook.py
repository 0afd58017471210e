"""A webhook receiver on 127.0.0.1 for tests: records every POST (time, path, JSON body); can fail the first N."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.local_http import serving


@dataclass
class Receiver:
    url: str
    calls: list[tuple[float, str, Any]] = field(default_factory=list)
    fail_first: int = 0
    attempts: int = 0

    def wait_for(self, count: int, timeout: float = 30.0) -> list[tuple[float, str, Any]]:
        deadline = time.monotonic() + timeout
        while len(self.calls) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(self.calls)} webhook calls after {timeout} s, expected {count}")
            time.sleep(0.02)
        return list(self.calls)


@contextmanager
def webhook_receiver(fail_first: int = 0) -> Iterator[Receiver]:
    receiver = Receiver(url="", fail_first=fail_first)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            receiver.attempts += 1
            if receiver.attempts <= receiver.fail_first:
                self.send_response(503)
                self.end_headers()
                return
            receiver.calls.append((time.monotonic(), self.path, json.loads(body or b"null")))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with serving(server) as port:
        receiver.url = f"http://127.0.0.1:{port}/hook"
        yield receiver
