"""A `http.server` server answering on 127.0.0.1 from a thread, for tests that need a real peer: the webhook
receiver (tests/support/webhook.py), a page on another origin (tests/browser/test_cross_site.py), a plain and a TLS
service for the client's transport (tests/client/test_http_transport.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer


@contextmanager
def serving(server: ThreadingHTTPServer) -> Iterator[int]:
    """`server` answering from a daemon thread while the block runs; yields its port. Shut down and closed after."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
