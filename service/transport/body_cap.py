"""A size cap on every request body but the uploads': enforced while the body is read, before anything parses it.

FastAPI reads a JSON body whole and parses it before any check of the route runs: a 128 MiB body to
POST .../recommendation (read scope) took the process from 81 MB to 1.94 GB before its 400, and PATCH parsed 64 MB
before it checked the notes' 20,000 characters. Uploads (POST /api/v1/runs, PUT /api/v1/live/runs/{id}/files/...)
stream their bodies to disk under their own caps (service/ingest/upload.py, service/live/pieces.py); every other
route takes a small JSON object (an edit, recommendation options, an alert rule, a token) and here gets at most
`max_bytes` (Settings.max_body_bytes, 1 MiB by default):
* a Content-Length above the cap is answered 413 `{"error": "BodyTooLarge", "detail"}` before a byte of the body
  is read;
* a body without one (chunked) is counted as it arrives, and it is answered the same way as soon as it passes the
  cap: at most `max_bytes` of it are ever held.
The refusal says `Connection: close` (the rest of the body is left unread). A body within the cap is handed to the
route as one message. This middleware sits inside the body timeout (service/transport/body.py), so a body that
stalls while it is counted is that middleware's 408, answered here as the route would have.

Belongs here: the cap and telling upload routes from the others. The cap's value is service/limits.py's.
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fp8_policy.service.errors import AppError
from fp8_policy.service.transport.raw_json import header_pairs, send_json

# The routes whose bodies are uploads, metered by their own code (service/runs/routes.py `create_run`,
# service/live/routes.py `append`).
_UPLOADS = (
    ("POST", re.compile(r"/api/v1/runs/?")),
    ("PUT", re.compile(r"/api/v1/live/runs/[^/]+/files/.+")),
)


def is_upload(method: str, path: str) -> bool:
    return any(method == m and pattern.fullmatch(path) for m, pattern in _UPLOADS)


class BodyCapMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_upload(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if declared is None and b"transfer-encoding" not in headers:  # no body at all (GET, DELETE, ...)
            await self.app(scope, receive, send)
            return
        if declared is not None and declared.strip().isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send, f"{int(declared)} bytes")
            return
        chunks: list[bytes] = []
        held = 0
        try:
            while True:
                message = await receive()
                if message["type"] != "http.request":  # the client went away: nobody to answer
                    return
                chunk = message.get("body", b"")
                held += len(chunk)
                if held > self.max_bytes:
                    await self._refuse(send, f"more than {self.max_bytes} bytes")
                    return
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
        except AppError as exc:  # the body timeout or minimum rate (service/transport/body.py)
            await send_json(
                send, exc.status_code, {"error": exc.error, "detail": exc.detail}, header_pairs(exc.headers)
            )
            return
        body: Message | None = {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        async def replay() -> Message:
            nonlocal body
            if body is None:
                return await receive()  # after the body: a disconnect, whenever it comes
            message, body = body, None
            return message

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send, size: str) -> None:
        detail = (
            f"the request body ({size}) is over the limit of {self.max_bytes} bytes for this route; only uploads "
            "(POST /api/v1/runs, PUT /api/v1/live/runs/{id}/files/...) take larger bodies"
        )
        await send_json(send, 413, {"error": "BodyTooLarge", "detail": detail}, [(b"connection", b"close")])
