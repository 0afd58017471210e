"""fp8-policy client: `PolicyClient` (HTTP, one method per endpoint), its typed errors, and the CLI commands.

Talks to the service over HTTP only: nothing here imports `service/`, `db/` or `policy/`.

`PolicyClient` and `backoff_delays` are loaded on first access (fp8_policy/_lazy.py, PEP 562): the `fp8-policy`
console script imports this package for its commands, and `fp8-policy serve` should not pay for httpx (about
0.15 s of CPU) before its first answer (issue 21).
"""

from typing import TYPE_CHECKING

from fp8_policy._lazy import lazy_attributes
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

if TYPE_CHECKING:  # `X as X`: explicit re-exports (PEP 484), so type checkers see the lazy names
    from fp8_policy.client.client import PolicyClient as PolicyClient
    from fp8_policy.client.client import backoff_delays as backoff_delays


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

__getattr__, __dir__ = lazy_attributes(
    __name__, globals(), dict.fromkeys(("PolicyClient", "backoff_delays"), "fp8_policy.client.client")
)
