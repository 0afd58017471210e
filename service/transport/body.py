"""Body-read timeout as pure ASGI middleware: every `receive()` of a request body must deliver within `timeout`.

A client that announces Content-Length 1 MB, sends 1 KB and goes quiet would otherwise hold its request (and the
upload's `.part` file) for ever: neither uvicorn nor Starlette bound the time between two body chunks. The guard
lives here rather than in the protocol because the application must see the failure to clean up after it: the
upload code removes its `.part` when reading raises. The timer is per read (like nginx's
`client_body_timeout`, https://nginx.org/en/docs/http/ngx_http_core_module.html#client_body_timeout), so a slow but
steady upload is never cut off; the concurrent-upload cap bounds how many slow ones can be in flight.
A body arrives in many reads (about 60 for an 8 MiB live piece), so each read's timer is asyncio's (`asyncio.
timeout`; the service runs on asyncio under uvicorn) rather than an anyio cancel scope, which cost 2-3x the CPU.
Once the body is complete, `receive()` is left alone (it then waits for a disconnect, which may take any time).
The response to a timed-out request carries `Connection: close`, so the half-read connection is dropped.

A per-read timer alone lets a client that sends one byte every few seconds hold its request (and an upload slot)
for ever. So a body must also keep an average rate: after `grace` seconds, at least `min_rate` bytes per second
since its first read (as Apache's mod_reqtimeout `MinRate`, https://httpd.apache.org/docs/2.4/mod/mod_reqtimeout.html); each read's deadline is the sooner of the per-read
timeout and the moment the average would fall below the floor. A slower body is answered 408 `BodyTooSlow`.
"""

from __future__ import annotations

import asyncio

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fp8_policy.service.errors import BodyTooSlow, RequestTimeout


class BodyTimeoutMiddleware:
    def __init__(self, app: ASGIApp, timeout: float, min_rate: float = 0.0, grace: float = 0.0) -> None:
        self.app = app
        self.timeout = timeout
        self.min_rate = min_rate
        self.grace = grace

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body_done = False
        timed_out = False
        started: float | None = None
        received = 0

        async def guarded_receive() -> Message:
            nonlocal body_done, timed_out, started, received
            if body_done:
                return await receive()
            now = anyio.current_time()
            if started is None:
                started = now
            wait, paced = self.timeout, False
            if self.min_rate > 0:
                left = started + self.grace + received / self.min_rate - now  # when the average falls below the floor
                if left < wait:
                    wait, paced = max(left, 0.0), True
            try:
                async with asyncio.timeout(wait):  # the loop's own timer: anyio.fail_after cost 2-3x as much CPU
                    message = await receive()
            except TimeoutError:
                timed_out = True
                if paced:
                    raise BodyTooSlow(
                        f"the request body arrived at {received / max(now + wait - started, 1e-9):.0f} bytes/s, "
                        f"below the minimum of {self.min_rate:g} bytes/s; the request was dropped"
                    ) from None
                raise RequestTimeout(f"no request body data for {self.timeout:g} s; the request was dropped") from None
            received += len(message.get("body", b""))
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        async def closing_send(message: Message) -> None:
            if timed_out and message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, guarded_receive, closing_send)
