"""Token format, scopes and the keyed hash stored in place of a token.

A token reads `fp8p_<8 hex>_<43 url-safe characters>`: `fp8p_<8 hex>` is its public prefix (looked up in the
database and shown by `fp8-policy token list`), the rest 256 random bits (Python's `secrets`). The database
keeps only HMAC-SHA256(key, token) (https://docs.python.org/3/library/hmac.html), compared with
`hmac.compare_digest` in constant time.

Where the key lives: `FP8_POLICY_SECRET_KEY` when set (then a copy of the database alone cannot confirm a
token); otherwise a random key generated on first use and stored in the database (`service_secrets`), so
every API process and the `fp8-policy token` CLI on the same database agree on it without configuration.
`key_id` (a fingerprint of the key, stored with each token) tells a token made under another key apart from
a wrong one, so the service can log why it rejects it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from fp8_policy.db.tokens import SecretRepository

SCOPES = ("read", "upload", "admin")  # each scope includes the ones before it
TOKEN_MARK = "fp8p"
KEY_SECRET_NAME = "token_hmac_key"
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,99}")
_TOKEN_PATTERN = re.compile(rf"({TOKEN_MARK}_[0-9a-f]{{8}})_[A-Za-z0-9_-]{{43}}")


def scope_allows(granted: str, needed: str) -> bool:
    """`admin` allows everything, `upload` allows upload and read, `read` only read."""
    return SCOPES.index(granted) >= SCOPES.index(needed)


def new_token() -> tuple[str, str]:
    """A fresh (token, prefix)."""
    prefix = f"{TOKEN_MARK}_{secrets.token_hex(4)}"
    return f"{prefix}_{secrets.token_urlsafe(32)}", prefix


def prefix_of(token: str) -> str | None:
    """The lookup prefix of a well-formed token, None for anything else."""
    match = _TOKEN_PATTERN.fullmatch(token)
    return match.group(1) if match else None


@dataclass(frozen=True)
class TokenHasher:
    """HMAC-SHA256 under one key; `key_id` names the key without revealing it."""

    key: bytes

    @property
    def key_id(self) -> str:
        return hmac.new(self.key, b"fp8-policy token key id", hashlib.sha256).hexdigest()[:16]

    def digest(self, token: str) -> str:
        return hmac.new(self.key, token.encode(), hashlib.sha256).hexdigest()


def load_hasher(session: Session, configured_key: str | None) -> TokenHasher:
    """The hasher for `FP8_POLICY_SECRET_KEY` if configured, else for the database's generated key (created
    here on first use; concurrent first uses agree on one)."""
    if configured_key:
        return TokenHasher(configured_key.encode())
    stored = SecretRepository(session).get_or_create(KEY_SECRET_NAME, secrets.token_urlsafe(32))
    return TokenHasher(stored.encode())


def is_expired(expires_at: datetime | None, now: datetime) -> bool:
    return expires_at is not None and expires_at <= now
