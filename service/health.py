"""The response model of `GET /healthz` (the route itself is in service/app.py): liveness plus a database round
trip. A failed round trip answers 503 with the same shape, `status` "error" and the driver's message. While
`fp8-policy serve` is still loading the application, its port already answers 503 with `status` "starting"
(service/transport/starting.py): 200 always means the service serves and its database answered."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class HealthRead(BaseModel):
    status: Literal["ok", "error", "starting"]
    database: str = Field(description="'ok', or '<ExceptionType>: <message>' when the round trip failed.")


HEALTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    503: {
        "model": HealthRead,
        "description": 'The database round trip failed (`status` is "error"), or the service is still starting '
        '(`status` is "starting", with `Retry-After`).',
    }
}
