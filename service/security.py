"""Browser-facing protection: cross-site state changes are refused, responses carry the security headers.

Belongs here: one pure ASGI middleware that
* refuses POST / PUT / PATCH / DELETE whose `Origin` is another origin (or `null`), or whose `Sec-Fetch-Site`
  says `cross-site` / `same-site`, with 403 `{"error": "CrossOriginRequest", "detail"}` — so a page on another
  site (or another port of this host) cannot upload, delete or recompute through a user's browser, even with a
  "simple" no-cors request (OWASP CSRF Prevention Cheat Sheet, "Verifying Origin With Standard Headers" and
  "Fetch Metadata headers"). Requests without those headers — curl, the Python client, CI — are not browsers'
  cross-site requests and pass. Origins listed in `Settings.allowed_origins` pass too.
* adds `X-Content-Type-Options: nosniff` to every response, and to HTML pages a Content-Security-Policy with
  scripts and styles from this origin only and `frame-ancestors 'none'` (MDN, "Content-Security-Policy"),
  plus `X-Frame-Options: DENY` for browsers without CSP level 2 and `Referrer-Policy: same-origin`.
Must not be here: authentication (service/auth), CORS (the API sends no CORS headers: cross-origin reads are
not offered).
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fp8_policy.service.transport.raw_json import send_json

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# data: and blob: images: Swagger UI's icons are data: URIs, the dashboard shows fetched images as blob: URLs.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
_ALWAYS = [(b"x-content-type-options", b"nosniff")]
_HTML = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
]
_DEFAULT_PORTS = {"http": 80, "https": 443}


class BrowserGuard:
    def __init__(self, app: ASGIApp, allowed_origins: Iterable[str] = ()) -> None:
        self.app = app
        self.allowed = frozenset(_normalise(origin) for origin in allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await send_json(send, 403, {"error": "CrossOriginRequest", "detail": refusal}, _ALWAYS)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                content_type = next((v for n, v in headers if n.lower() == b"content-type"), b"")
                extra = _ALWAYS + (_HTML if content_type.startswith(b"text/html") else [])
                headers += [(name, value) for name, value in extra if name not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _refusal(self, scope: Scope) -> str | None:
        if scope["method"] not in STATE_CHANGING:
            return None
        headers = {name.lower(): value for name, value in scope["headers"]}
        origin = headers.get(b"origin")
        if origin is not None:
            text = origin.decode("latin-1").strip()
            host = headers.get(b"host", b"").decode("latin-1")
            if _normalise(text) in self.allowed or _same_origin(text, host):
                return None
            return (
                f"{scope['method']} from origin {text[:100]!r} refused: state-changing requests must come "
                "from this service's own pages (or a client that sends no Origin header)"
            )
        site = headers.get(b"sec-fetch-site", b"").decode("latin-1").strip().lower()
        if site in ("cross-site", "same-site"):
            return (
                f"{scope['method']} from a {site} page refused: state-changing requests must come from this "
                "service's own pages"
            )
        return None


def _same_origin(origin: str, host: str) -> bool:
    """The Origin names the host and port the request was sent to (the Host header). The scheme is not compared:
    behind a TLS-terminating proxy the service sees http while the page is https; a Host without a port means
    the default port of the page's scheme. `null` (sandboxed frames, file: pages) is never same-origin."""
    try:
        page = urlsplit(origin)
        target = urlsplit(f"//{host}")
        default = _DEFAULT_PORTS.get(page.scheme.lower())
        return (
            bool(page.hostname)
            and page.hostname == target.hostname
            and (page.port or default) == (target.port or default)
        )
    except ValueError:
        return False


def _normalise(origin: str) -> str:
    """`scheme://host:port`, lower-case, default port explicit; '' when it is not an origin."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:
        return ""
    if not parts.scheme or not parts.hostname:
        return ""
    return f"{parts.scheme.lower()}://{parts.hostname.lower()}:{port}"
