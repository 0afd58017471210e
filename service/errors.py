"""Errors that carry their HTTP status; one handler renders every one as {"error", "detail"}."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException


class ErrorBody(BaseModel):
    error: str
    detail: str


class AppError(Exception):
    status_code = 500
    headers: dict[str, str] | None = None

    def __init__(self, detail: str, *, error: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.error = error or type(self).__name__


class BadRequest(AppError):
    status_code = 400


class InvalidUpload(AppError):
    status_code = 400


class NotFound(AppError):
    status_code = 404


class Conflict(AppError):
    status_code = 409


class UploadTooLarge(AppError):
    status_code = 413


class UnsupportedMediaType(AppError):
    status_code = 415


class NotReady(AppError):
    status_code = 409


class Unauthorized(AppError):
    """401: no token, or one that is unknown, revoked or expired (RFC 6750 §3 challenge)."""

    status_code = 401

    def __init__(self, detail: str, *, invalid_token: bool = False) -> None:
        super().__init__(detail)
        challenge = 'Bearer realm="fp8-policy"' + (', error="invalid_token"' if invalid_token else "")
        self.headers = {"WWW-Authenticate": challenge}


class Forbidden(AppError):
    """403: a valid token whose scope does not cover the request."""

    status_code = 403

    def __init__(self, detail: str, *, needed_scope: str) -> None:
        super().__init__(detail, error="InsufficientScope")
        self.headers = {
            "WWW-Authenticate": f'Bearer realm="fp8-policy", error="insufficient_scope", scope="{needed_scope}"'
        }


# Named errors: the class name is the wire code ({"error": "<ClassName>"}), the base class the status.
# 400: the request's own content is wrong.
class InvalidParameter(BadRequest):
    """A query or path parameter out of range or of the wrong type."""


class UnknownParameter(BadRequest):
    """A query parameter the route does not take (a typo would otherwise be silently ignored)."""


class UnknownFormat(BadRequest):
    """A render or image format the service does not produce."""


class InvalidThresholds(BadRequest):
    """Analysis thresholds that are unknown, not numbers, or inconsistent."""


class InvalidRunSelection(BadRequest):
    """A compare of fewer than 2 or more than 8 runs, a run named twice, or ids that are not run ids."""


class InvalidOverrides(BadRequest):
    """Recommendation overrides (BF16 layers, GPU, TE version) that do not apply to the run."""


class PipelineStageRequired(BadRequest):
    """A per-stage file (te-yaml, te-monitor) of a job whose stages name their blocks locally, asked without
    `pp_stage`: the detail names the stages and how to ask for one."""


class NoData(BadRequest):
    """Nothing to draw or analyse for the selection asked for."""


class ImageTooLarge(BadRequest):
    """An image whose pixel count would exceed the render bound."""


class InvalidTokenName(BadRequest):
    pass


class InvalidScope(BadRequest):
    pass


class InvalidExpiry(BadRequest):
    pass


class InvalidLivePath(BadRequest):
    """A live file path that is absolute, climbs with '..', is compressed or too long."""


class NoStatsLogs(BadRequest):
    """A live run finalized before any statistics log arrived."""


class InvalidWebhook(BadRequest):
    pass


class InvalidAlertRule(BadRequest):
    pass


# 401 (each sends the RFC 6750 challenge).
class TokenRequired(Unauthorized):
    pass


class InvalidToken(Unauthorized):
    pass


class TokenRevoked(Unauthorized):
    pass


class TokenExpired(Unauthorized):
    pass


class TokenNotFound(NotFound):
    pass


class TokenNameTaken(Conflict):
    pass


class NotRetryable(Conflict):
    """A retry of a run that has not failed."""


class UploadMissing(Conflict):
    """A retry of a failed run whose upload is no longer stored."""


class ScalarsTooLarge(UploadTooLarge):
    """A piece that would make a live run's training scalars larger than their bound (service/limits.py)."""


# --- refusals raised by one feature (kept here too: every AppError the service answers with is in this module) ---
class HostNotAllowed(AppError):
    """403: the Host header names no name of this machine (service/auth/hosts.py, DNS rebinding)."""

    status_code = 403


class NotRunOwner(AppError):
    """A run is changed by the token that uploaded or started it (and, for a finalize or an edit, an admin token)."""

    status_code = 403


class InvalidTarget(BadRequest):
    """400: `target` is not speedup:<x> (1-10) or risk:<x> (0-1e6 nats per step)."""


class NoSensitivity(Conflict):
    """409: the run has no frontier to re-solve on (no loss-sensitivity statistics)."""


class InvalidExperiment(BadRequest):
    """400: the experiment body is malformed."""


class ExperimentForOtherRun(BadRequest):
    """400: the experiment names another run or project, or layers this run does not have."""


class UnequalSteps(BadRequest):
    """400: the arms did not train the same number of steps."""


class UnequalReplicates(BadRequest):
    """400: some arms carry `heldout_losses` and others do not, or of unequal lengths, or `seeds` of another length
    (replicate r of every arm must be trained under the same seed)."""


class NonFiniteNumber(BadRequest):
    """400: NaN or infinity where a number is required (a diverged loss is allowed)."""


class NotLive(AppError):
    """409: a live run's route on a run that is not (or no longer) live."""

    status_code = 409


class OffsetMismatch(AppError):
    """409 with the offset the next piece must start at (`Upload-Offset`, as in the tus protocol)."""

    status_code = 409

    def __init__(self, detail: str, *, expected: int) -> None:
        super().__init__(detail)
        self.headers = {"Upload-Offset": str(expected)}


class OffsetGap(OffsetMismatch):
    """A piece that starts after the bytes received so far."""


class OffsetConflict(OffsetMismatch):
    """A piece whose overlap with the bytes received so far differs from them."""


class PieceTooLarge(AppError):
    """413: a live run's piece over its bound (service/live/routes.py MAX_PIECE_BYTES)."""

    status_code = 413


class RequestTimeout(AppError):
    """408: no body data within the timeout (the code is the class name, as for every AppError)."""

    status_code = 408


class BodyTooSlow(AppError):
    """408: the body arrives slower than the service's minimum rate (a trickling client holding a slot)."""

    status_code = 408


class InsufficientStorage(AppError):
    """507 (RFC 4918 §11.5): the service ran out of disk space (service/storage/disk.py)."""

    status_code = 507


class RetryLater(AppError):
    """Refused for now: `Retry-After` says when to ask again; `close_connection` when the body was left unread, so
    the connection cannot carry another request."""

    status_code = 503
    retry_after_seconds = 5
    close_connection = False

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.headers = {"Retry-After": str(self.retry_after_seconds)}
        if self.close_connection:
            self.headers["Connection"] = "close"


class ComputeQueueFull(RetryLater):
    """429: a compute lane is full (service/lanes.py)."""

    status_code = 429


class RenderQueueFull(RetryLater):
    """429: the image renderer's queue is full (service/visual/pool.py)."""

    status_code = 429
    retry_after_seconds = 2


class RendererUnavailable(RetryLater):
    """503: the image renderer is stopping or could not start (service/visual/pool.py)."""

    retry_after_seconds = 2


class TooManyPieces(RetryLater):
    """503: the live pieces being received at once are at their cap (service/live/pieces.py)."""

    retry_after_seconds = 2
    close_connection = True


class TooManyUploads(RetryLater):
    """503: uploads being received at once are at their cap, overall or for this client (service/transport/uploads.py)."""

    close_connection = True


_HTTP_NAMES = {
    400: "BadRequest",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    413: "UploadTooLarge",
    415: "UnsupportedMediaType",
}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(AppError)
    async def _app_error(_request: Request, exc: AppError) -> JSONResponse:
        return JSONResponse(
            {"error": exc.error, "detail": exc.detail}, status_code=exc.status_code, headers=exc.headers
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        name = _HTTP_NAMES.get(exc.status_code, "HTTPError")
        return JSONResponse(
            {"error": name, "detail": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers
        )

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        return internal_error(exc)


# An unexpected error is answered by Starlette's ServerErrorMiddleware, outside every other middleware (the security
# headers of service/security.py included), which re-raises it once the answer is sent; uvicorn then closes the
# connection (uvicorn/protocols/http/httptools_impl.py `run_asgi`). So the answer carries its own `nosniff` and says
# `Connection: close`, instead of a kept-alive connection being reset under the client's next request.
INTERNAL_ERROR_HEADERS = {"Connection": "close", "X-Content-Type-Options": "nosniff"}


def internal_error(exc: BaseException) -> JSONResponse:
    """The 500 `{"error": "InternalError", "detail"}` of an unexpected exception (never the exception's text)."""
    return JSONResponse(
        {"error": "InternalError", "detail": f"unexpected {type(exc).__name__}; see the service log"},
        status_code=500,
        headers=INTERNAL_ERROR_HEADERS,
    )


class EmptyUpload(InvalidUpload):
    """The upload has no bytes."""
