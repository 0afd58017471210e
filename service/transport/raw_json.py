"""A JSON answer sent straight through ASGI `send`, by the middlewares that answer before any route (and so before
FastAPI's error handlers) runs: the cross-site refusal (service/security.py) and the body cap's refusals
(service/transport/body_cap.py).

The body is `json.dumps` of a flat object, the headers its content type and length plus the caller's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from starlette.types import Send


async def send_json(send: Send, status: int, body: dict[str, str], headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


def header_pairs(headers: dict[str, str] | None) -> list[tuple[bytes, bytes]]:
    """An AppError's `headers` as ASGI header pairs (lower-case names, latin-1)."""
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in (headers or {}).items()]
