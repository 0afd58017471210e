"""OpenAPI documentation helpers shared by the route modules: documented error responses and query parameters
that a route validates by hand (so that a bad value is a 400 `{"error", "detail"}`, not FastAPI's 422).

* `error_responses(400, 404, ...)` -> the `responses=` entries of those statuses, each with the `ErrorBody` model
  and a description of when this API answers it. Every route lists the statuses it can produce;
  tests/service/app/test_openapi_document.py fails on a route whose error responses are missing or undocumented.
* `query_param(...)` -> one OpenAPI parameter object, for `openapi_extra={"parameters": [...]}` on routes that
  read `request.query_params` themselves; FastAPI appends these to the parameters it derives from the signature.
* `threshold_params()` -> one optional query parameter per `policy.thresholds.Thresholds` field (typed, described).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from fp8_policy.policy.thresholds import Thresholds
from fp8_policy.service.errors import ErrorBody
from fp8_policy.service.schema_base import threshold_help, threshold_type

ERROR_DESCRIPTIONS: dict[int, str] = {
    400: "Bad input: `error` names the problem (e.g. InvalidParameter, UnknownParameter, InvalidThresholds, "
    "UnknownFormat, NoData, InvalidUpload) and `detail` says what to change.",
    401: "Missing, invalid, revoked or expired API token.",
    403: "The token's scope does not allow this request, or the request came from another site (Origin).",
    404: "No such run (or resource).",
    409: "The run is not ready yet (queued or processing) or failed; `detail` says which.",
    413: "The upload is larger than the service accepts (`FP8_POLICY_MAX_UPLOAD_BYTES`).",
    415: "The body's Content-Type is not one of the accepted upload types.",
    429: "Too many requests of this kind are in progress; retry later.",
    500: "A bug in the service (`error` is InternalError); the service log has the traceback.",
    503: "The service cannot take this request now (database unavailable, too many uploads); retry later.",
    507: "The service's disk is full; nothing was stored.",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` entries for these statuses, all `{"error", "detail"}`; 500 is always included."""
    return {code: {"model": ErrorBody, "description": ERROR_DESCRIPTIONS[code]} for code in sorted({*codes, 500})}


def query_param(name: str, schema: dict[str, Any], description: str, *, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "description": description, "schema": schema}


def threshold_params(names: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Query parameters for thresholds (all of them, or `names`), typed and described from `Thresholds`."""
    defaults = Thresholds()
    selected = [f.name for f in fields(Thresholds) if names is None or f.name in names]
    return [
        query_param(
            name,
            {"type": "integer" if threshold_type(name) is int else "number", "default": getattr(defaults, name)},
            f"Threshold: {threshold_help().get(name, name)}. Must keep 0 <= warning < critical < severe."
            if name in ("warning", "critical", "severe")
            else f"Threshold: {threshold_help().get(name, name)}.",
        )
        for name in selected
    ]
