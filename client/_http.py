"""The one place that imports httpx: a session over one `httpx.Client` that turns failures into `PolicyError`s.

Belongs here: building the client (base URL, bearer token, timeout, an injectable transport for tests),
sending requests, streaming downloads to files, and mapping transport failures and `{"error", "detail"}`
bodies (plus FastAPI's 422 validation shape) onto `client.errors`. Must not be here: endpoint paths or any
knowledge of runs; those live in `client.py`.
"""

from __future__ import annotations

import email.utils
import os
import ssl
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from fp8_policy._version import __version__
from fp8_policy.client.errors import ApiError, ConnectionFailed, Forbidden, NotFound, PolicyError, Unauthorized

USER_AGENT = f"fp8-policy-client/{__version__}"
DEFAULT_TIMEOUT = 60.0


def service_root(url: str) -> str:
    """The service's root URL: `http://host:8000/api/v1` (the API's prefix, as the docs show every route) is read as
    `http://host:8000`; a trailing slash is dropped."""
    root = url.rstrip("/")
    for suffix in ("/api/v1", "/api"):
        if root.endswith(suffix):
            return root[: -len(suffix)]
    return root


def _clean(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Query parameters without the ones left as None."""
    if params is None:
        return None
    return {key: value for key, value in params.items() if value is not None}


_ERRORS_BY_STATUS: dict[int, type[ApiError]] = {401: Unauthorized, 403: Forbidden, 404: NotFound}


def error_from_response(response: httpx.Response) -> ApiError:
    """The typed error for a non-2xx response, keeping the server's `error` and `detail`."""
    status = response.status_code
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        error, detail = body["error"], str(body.get("detail", ""))
    elif isinstance(body, dict) and isinstance(body.get("detail"), list):  # FastAPI request validation (422)
        parts = [
            f"{'.'.join(str(p) for p in item.get('loc', ()))}: {item.get('msg', '')}"
            for item in body["detail"]
            if isinstance(item, dict)
        ]
        error, detail = "ValidationError", "; ".join(parts) or "invalid request"
    else:
        error = f"HTTP{status}"
        detail = _foreign_answer(response)
    cls = _ERRORS_BY_STATUS.get(status, ApiError)
    return cls(status, error, detail, retry_after=retry_after(response.headers.get("retry-after")))


def _foreign_answer(response: httpx.Response) -> str:
    """The detail of an error that is not the service's `{"error", "detail"}` JSON: another server answered (a
    proxy, another service on that port, a URL with a path), so say so instead of printing its page."""
    status = response.status_code
    kind = response.headers.get("content-type", "").split(";")[0].strip() or "no content type"
    if kind == "text/plain" and len(response.text) <= 300 and "<" not in response.text:
        return response.text.strip() or f"HTTP {status}"
    return (
        f"{response.request.url} answered HTTP {status} with {kind}, not the fp8-policy API's JSON: is the URL an "
        "fp8-policy service (its root, e.g. http://host:8000, with no /api/v1), and not a proxy's or another "
        "server's page?"
    )


def retry_after(value: str | None) -> float | None:
    """The seconds a Retry-After header asks to wait: delay-seconds or an HTTP-date (RFC 9110, section 10.2.3);
    None without a header or with one that is neither."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, as every HTTP-date is
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def json_object(response: httpx.Response) -> dict[str, Any]:
    """The response's body as a JSON object; ApiError `UnexpectedResponse` when it is anything else."""
    body = _decoded(response)
    if not isinstance(body, dict):
        raise _unexpected(response, "an object", body)
    return body


def _decoded(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _unexpected(response: httpx.Response, expected: str, body: Any) -> ApiError:
    """A 2xx answer the client cannot use (a proxy's HTML page, another service on that port, ...)."""
    what = "no JSON" if body is None else f"a JSON {type(body).__name__}"
    request = response.request
    return ApiError(
        response.status_code,
        "UnexpectedResponse",
        f"{request.method} {request.url.path} answered {what}, expected {expected}",
    )


class _TlsWhenAsked(httpx.BaseTransport):
    """httpx's transport, with the TLS setup left until a request needs it.

    `httpx.Client()` builds its SSL context at once, loading the CA bundle (certifi): 45-75 ms of CPU on the 2-core
    dev VM, paid by every command against a plain-HTTP service (`fp8-policy runs --json` on loopback: 237 ms median
    before, 206 ms after). Here an http:// request goes through a transport whose SSL context trusts no certificate
    (it could not complete a TLS handshake if it were ever given one: it fails closed), and the verifying transport,
    built as httpx builds it (CA bundle, SSL_CERT_FILE / SSL_CERT_DIR), serves https:// requests from the first one
    on. Proxies from the environment are mounted by the client as before."""

    def __init__(self) -> None:
        self._plain: httpx.HTTPTransport | None = None
        self._tls: httpx.HTTPTransport | None = None
        self._building = threading.Lock()  # a client may be shared by threads (the live uploader's)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._transport(request.url.scheme == "https").handle_request(request)

    def _transport(self, tls: bool) -> httpx.HTTPTransport:
        with self._building:
            if tls:
                if self._tls is None:
                    self._tls = httpx.HTTPTransport()
                return self._tls
            if self._plain is None:
                self._plain = httpx.HTTPTransport(verify=ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
            return self._plain

    def close(self) -> None:
        with self._building:
            for transport in (self._plain, self._tls):
                if transport is not None:
                    transport.close()


class HttpSession:
    """One `httpx.Client` for one service; every method raises `PolicyError`s, never httpx exceptions."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"User-Agent": USER_AGENT}
        if token:
            if not token.isascii():  # httpx would fail encoding the header; the token itself is not repeated
                raise PolicyError("a token is ASCII text; the one given is not", error="InvalidToken")
            headers["Authorization"] = f"Bearer {token}"
        try:
            self._client = httpx.Client(
                base_url=self.base_url, headers=headers, timeout=timeout, transport=transport or _TlsWhenAsked()
            )
        except httpx.InvalidURL as exc:  # "http://[::1", a port that is no number: refused before any request
            raise ConnectionFailed(self.base_url, _reason(exc)) from exc

    def close(self) -> None:
        self._client.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        files: Any = None,
        data: Mapping[str, str] | None = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """Send one request and return the (2xx) response; raises ApiError/NotFound/ConnectionFailed."""
        try:
            response = self._client.request(
                method, path, params=_clean(params), json=json, files=files, data=data, content=content, headers=headers
            )
        except httpx.TransportError as exc:
            raise ConnectionFailed(self.base_url, _reason(exc)) from exc
        if response.is_error:
            raise error_from_response(response)
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        """The decoded JSON body of a successful request (None for an empty body, e.g. 204)."""
        response = self.request(method, path, **kwargs)
        return response.json() if response.content else None

    def json_object(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """The JSON object a successful request answers (ApiError `UnexpectedResponse` for any other body)."""
        return json_object(self.request(method, path, **kwargs))

    def json_list(self, method: str, path: str, **kwargs: Any) -> list[dict[str, Any]]:
        """The JSON array of objects a successful request answers (ApiError `UnexpectedResponse` otherwise)."""
        response = self.request(method, path, **kwargs)
        body = _decoded(response)
        if not isinstance(body, list) or not all(isinstance(item, dict) for item in body):
            raise _unexpected(response, "an array of objects", body)
        return body

    def download(self, path: str, dest: Path, *, params: Mapping[str, Any] | None = None) -> int:
        """Stream a GET response body to `dest` (written to a temporary name, then renamed); returns bytes."""
        dest = Path(dest)
        partial = dest.with_name(f".{dest.name}.part")
        if not dest.parent.is_dir():  # said before the download, and about the file asked for (not `partial`)
            raise PolicyError(f"cannot write {dest}: no directory {dest.parent}", error="OutputNotWritable")
        written = 0
        try:
            with self._client.stream("GET", path, params=_clean(params)) as response:
                if response.is_error:
                    response.read()
                    raise error_from_response(response)
                try:
                    handle = open(partial, "wb")  # noqa: SIM115 - closed by the with-block below
                except OSError as exc:
                    raise PolicyError(f"cannot write {dest}: {exc.strerror}", error="OutputNotWritable") from exc
                with handle:
                    for chunk in response.iter_bytes():
                        handle.write(chunk)
                        written += len(chunk)
        except httpx.TransportError as exc:
            partial.unlink(missing_ok=True)
            raise ConnectionFailed(self.base_url, _reason(exc)) from exc
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        os.replace(partial, dest)
        return written


def _reason(exc: httpx.TransportError | httpx.InvalidURL) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
