"""The client's exceptions: one `PolicyError` tree, each carrying an `error` code and a `detail` sentence.

Belongs here: the exception classes and nothing else. `_http.py` maps HTTP failures onto them, `client.py`
raises the ingest ones, and the CLI prints every one as `error: <error>: <detail>` (exit code 2).
Server errors keep the service's own `{"error", "detail"}` body, so `ApiError.error` is e.g. `InvalidUpload`.
"""

from __future__ import annotations

from typing import Any


class PolicyError(Exception):
    """Base of every error the client raises; `error` is a CodeName, `detail` says what went wrong."""

    def __init__(self, detail: str, *, error: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.error = error or type(self).__name__

    def __str__(self) -> str:
        return f"{self.error}: {self.detail}"


class ApiError(PolicyError):
    """The service answered with an error status; `error` and `detail` are the server's own, `retry_after` the
    seconds its Retry-After header asked to wait (None without one)."""

    def __init__(self, status: int, error: str, detail: str, *, retry_after: float | None = None) -> None:
        super().__init__(detail, error=error)
        self.status = status
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        """A 503 with Retry-After: the service says it is unavailable for that long (starting, or busy), not
        that the request is wrong (RFC 9110, sections 15.6.4 and 10.2.3)."""
        return self.status == 503 and self.retry_after is not None


class NotFound(ApiError):
    """404: the run (or route) does not exist on this service."""


class Unauthorized(ApiError):
    """401: the service needs an access token, or the one sent is unknown, revoked or expired
    (pass `token=` / `--token`, or set FP8_POLICY_TOKEN)."""


class Forbidden(ApiError):
    """403: the token is valid but its scope (read < upload < admin) does not cover the request."""


class ConnectionFailed(PolicyError):
    """The service could not be reached (refused, DNS, TLS, timeout); the message names the URL."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot reach the fp8-policy service at {url}: {reason}")
        self.url = url


class NoLogFiles(PolicyError):
    """A directory to upload holds no nvdlfw_inspect log files; raised before anything is sent."""


class IngestFailed(PolicyError):
    """The run's ingest failed on the server; `server_error` is the run's `error` ('<Code>: <detail>')."""

    def __init__(self, run: dict[str, Any]) -> None:
        self.run = run
        self.server_error = str(run.get("error") or "no error text")
        super().__init__(f"run {run.get('id')} failed: {self.server_error}")


class WaitTimeout(PolicyError):
    """`wait` gave up: the run was still `queued` or `processing` after the timeout."""

    def __init__(self, run_id: int, status: str, timeout: float) -> None:
        super().__init__(f"run {run_id} is still {status} after {timeout:g} s")
        self.run_id = run_id
        self.status = status
        self.timeout = timeout
