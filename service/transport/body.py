"""Body-read timeout as pure ASGI middleware: every `receive()` of a request body must deliver within `timeout`.

A client that announces Content-Length 1 MB, sends 1 KB and goes quiet would otherwise hold its request (and the
upload's `.part` file) for ever: neither uvicorn nor Starlette bound the time between two body chunks. The guard
lives here rather than in the protocol because the application must see the failure to clean up after it: the
upload code removes its `.part` when reading raises. The timer is per read (like nginx's
`client_body_timeout`, https://nginx.org/en/docs/http/ngx_http_core_module.html#client_body_timeout), so a slow but
steady upload is never cut off; the concurrent-upload cap bounds how many slow ones can be in flight.
Once the body is complete, `receive()` is left alone (it then waits for a disconnect, which may take any time).
The response to a timed-out request carries `Connection: close`, so the half-read connection is dropped.
"""

from __future__ import annotations

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fp8_policy.service.errors import AppError


class RequestTimeout(AppError):
    """408: no body data within the timeout (the code is the class name, as for every AppError)."""

    status_code = 408


class BodyTimeoutMiddleware:
    def __init__(self, app: ASGIApp, timeout: float) -> None:
        self.app = app
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body_done = False
        timed_out = False

        async def guarded_receive() -> Message:
            nonlocal body_done, timed_out
            if body_done:
                return await receive()
            try:
                with anyio.fail_after(self.timeout):
                    message = await receive()
            except TimeoutError:
                timed_out = True
                raise RequestTimeout(f"no request body data for {self.timeout:g} s; the request was dropped") from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        async def closing_send(message: Message) -> None:
            if timed_out and message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, guarded_receive, closing_send)
