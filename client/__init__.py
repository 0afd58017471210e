"""fp8-policy client: `PolicyClient` (HTTP, one method per endpoint), its typed errors, and the CLI commands.

Talks to the service over HTTP only: nothing here imports `service/`, `db/` or `policy/`.
"""

from fp8_policy.client.client import FORMATS, PolicyClient, backoff_delays
from fp8_policy.client.errors import (
    ApiError,
    ConnectionFailed,
    Forbidden,
    IngestFailed,
    NoLogFiles,
    NotFound,
    PolicyError,
    Unauthorized,
    WaitTimeout,
)

__all__ = [
    "FORMATS",
    "ApiError",
    "ConnectionFailed",
    "Forbidden",
    "IngestFailed",
    "NoLogFiles",
    "NotFound",
    "PolicyClient",
    "PolicyError",
    "Unauthorized",
    "WaitTimeout",
    "backoff_delays",
]
