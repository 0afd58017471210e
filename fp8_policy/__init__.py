"""fp8-policy: turn Transformer Engine FP8 debug statistics into a precision policy.

The one import namespace of the project. The base install (`pip install fp8-policy`) is the client:

    from fp8_policy import PolicyClient, apply_policy

Subpackages map the repository's folders (setup.py): `fp8_policy.client` (HTTP client, CLI commands, CI
gate, `apply`), `fp8_policy.policy` (pure parsing, classification, recommendation), `fp8_policy.db`
(SQLAlchemy), `fp8_policy.service` (the FastAPI service), `fp8_policy.migrations` (Alembic). The public
names below are resolved on first use (PEP 562), so importing a server subpackage never loads the HTTP
client and importing the client never loads the server.

`__version__` is the distribution's version, written once in fp8_policy/_version.py: pyproject.toml reads it from
there (`[tool.setuptools.dynamic]`), so the wheel's metadata, `fp8-policy --version` and this attribute cannot disagree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fp8_policy._lazy import lazy_attributes
from fp8_policy._version import __version__ as __version__  # re-exported

_EXPORTS = {
    "ApiError": "fp8_policy.client.errors",
    "ConnectionFailed": "fp8_policy.client.errors",
    "Forbidden": "fp8_policy.client.errors",
    "IngestFailed": "fp8_policy.client.errors",
    "NoLogFiles": "fp8_policy.client.errors",
    "NotFound": "fp8_policy.client.errors",
    "PolicyError": "fp8_policy.client.errors",
    "Unauthorized": "fp8_policy.client.errors",
    "WaitTimeout": "fp8_policy.client.errors",
    "PolicyClient": "fp8_policy.client.client",
    "LiveUploader": "fp8_policy.client.live",
    "UnmatchedLayers": "fp8_policy.client.apply",
    "apply_policy": "fp8_policy.client.apply",
    "recipe_from_policy": "fp8_policy.client.apply",
    "write_te_debug_config": "fp8_policy.client.apply",
    "StageUnknown": "fp8_policy.client.apply",
    "record_parallel_layout": "fp8_policy.client.parallel_record",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # `X as X`: explicit re-exports (PEP 484), so type checkers see the lazy names
    from fp8_policy.client.apply import StageUnknown as StageUnknown
    from fp8_policy.client.apply import UnmatchedLayers as UnmatchedLayers
    from fp8_policy.client.apply import apply_policy as apply_policy
    from fp8_policy.client.apply import recipe_from_policy as recipe_from_policy
    from fp8_policy.client.apply import write_te_debug_config as write_te_debug_config
    from fp8_policy.client.client import PolicyClient as PolicyClient
    from fp8_policy.client.errors import ApiError as ApiError
    from fp8_policy.client.errors import ConnectionFailed as ConnectionFailed
    from fp8_policy.client.errors import Forbidden as Forbidden
    from fp8_policy.client.errors import IngestFailed as IngestFailed
    from fp8_policy.client.errors import NoLogFiles as NoLogFiles
    from fp8_policy.client.errors import NotFound as NotFound
    from fp8_policy.client.errors import PolicyError as PolicyError
    from fp8_policy.client.errors import Unauthorized as Unauthorized
    from fp8_policy.client.errors import WaitTimeout as WaitTimeout
    from fp8_policy.client.live import LiveUploader as LiveUploader
    from fp8_policy.client.parallel_record import record_parallel_layout as record_parallel_layout


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _EXPORTS)
