"""The OpenAPI description of `POST /api/v1/runs`, whose body `service.ingest.upload` streams by hand (so FastAPI
cannot derive it): a multipart form with a `file` part, or a raw archive / log body with the fields as query
parameters. The raw media types are `upload.RAW_TYPES` itself, so the document lists exactly what is accepted.
"""

from __future__ import annotations

from typing import Any

from fp8_policy.service.ingest.upload import RAW_TYPES
from fp8_policy.service.openapi import query_param

_FIELDS: dict[str, dict[str, Any]] = {
    "name": {"type": "string", "maxLength": 200, "description": "A display name for the run."},
    "project": {
        "type": "string",
        "maxLength": 200,
        "default": "default",
        "description": "Identical bytes in the same project return the existing run (200).",
    },
    "tags": {
        "type": "string",
        "examples": ["nightly,h100"],
        "description": "Comma-separated, at most 50 tags of at most 100 characters.",
    },
    "metadata": {
        "type": "string",
        "contentMediaType": "application/json",
        "examples": ['{"hidden_size": 1280, "gpu": "h100", "recipe": "DelayedScaling"}'],
        "description": "A JSON object: model dims, GPU arch, recipe, TE version, ... (used by the recommendation).",
    },
}
_BINARY = {"type": "string", "format": "binary"}

UPLOAD_OPENAPI: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "An `fp8_log_dir` archive (tar, tar.gz/tgz, zip) or one statistics log (.log, .log.gz): "
        "as the `file` part of a multipart form, or as the raw body with the fields as query "
        "parameters.",
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {"file": {**_BINARY, "description": "The archive or log."}, **_FIELDS},
                },
                "encoding": {"file": {"contentType": "application/octet-stream"}},
            },
            **{media_type: {"schema": _BINARY} for media_type in sorted(RAW_TYPES)},
        },
    },
    "parameters": [
        query_param(
            name,
            {k: v for k, v in schema.items() if k != "description"},
            f"{schema['description']} For a raw body (a multipart form sends it as a field).",
        )
        for name, schema in _FIELDS.items()
    ],
}
