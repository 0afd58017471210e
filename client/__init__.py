"""fp8-policy client: `PolicyClient` (HTTP, one method per endpoint), its typed errors, and the CLI commands.

Talks to the service over HTTP only: nothing here imports `service/`, `db/` or `policy/`.

`PolicyClient` and `backoff_delays` are loaded on first access (PEP 562 module `__getattr__`): the `fp8-policy`
console script imports this package for its commands, and `fp8-policy serve` should not pay for httpx (about
0.15 s of CPU) before its first answer (issue 21).
"""

from typing import TYPE_CHECKING, Any

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
from fp8_policy.client.formats import FORMATS

if TYPE_CHECKING:
    from fp8_policy.client.client import PolicyClient, backoff_delays

_LAZY = {"PolicyClient", "backoff_delays"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from fp8_policy.client import client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
