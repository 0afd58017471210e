"""Token use cases shared by the `fp8-policy token` commands and the /api/v1/tokens routes: create, list, revoke,
and verify a presented token. Validation errors are `AppError`s (400/404/409), so both callers report them alike.
"""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from fp8_policy.db.runs import utcnow
from fp8_policy.db.token_models import ApiToken
from fp8_policy.db.tokens import NewToken, TokenRepository
from fp8_policy.service.auth.tokens import NAME_PATTERN, SCOPES, TokenHasher, is_expired, new_token, prefix_of
from fp8_policy.service.errors import (
    InvalidExpiry,
    InvalidScope,
    InvalidToken,
    InvalidTokenName,
    TokenExpired,
    TokenNameTaken,
    TokenNotFound,
    TokenRevoked,
)

log = logging.getLogger("fp8_policy.auth")
MAX_EXPIRES_DAYS = 36_500
# last_used_at is written at most once per interval per token (and process): a busy CI token costs one
# UPDATE a minute, not one per request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who sent a request: a token (name, scope) or, while the service is open, anonymous with every scope."""

    name: str | None
    scope: str
    expires_at: datetime | None = None

    @property
    def anonymous(self) -> bool:
        return self.name is None


ANONYMOUS = Principal(name=None, scope="admin")


def token_info(token: ApiToken, now: datetime | None = None) -> dict[str, Any]:
    """A token row as shown by `token list` and GET /api/v1/tokens (never its hash)."""
    now = now or utcnow()
    state = "revoked" if token.revoked_at else "expired" if is_expired(token.expires_at, now) else "active"
    return {
        "name": token.name,
        "scope": token.scope,
        "prefix": token.prefix,
        "state": state,
        "created_at": token.created_at,
        "last_used_at": token.last_used_at,
        "expires_at": token.expires_at,
        "revoked_at": token.revoked_at,
    }


def create_token(
    session: Session, hasher: TokenHasher, name: str, scope: str, expires_days: int | None = None
) -> tuple[ApiToken, str]:
    """Store a new token and return (row, token); the token itself exists only in this return value."""
    if not NAME_PATTERN.fullmatch(name or ""):
        raise InvalidTokenName(
            "a token name is 1 to 100 letters, digits, '.', '_', '@' or '-', starting with a letter or digit"
        )
    if scope not in SCOPES:
        raise InvalidScope(f"scope must be one of {', '.join(SCOPES)}, not {scope!r}")
    if expires_days is not None and not 1 <= expires_days <= MAX_EXPIRES_DAYS:
        raise InvalidExpiry(f"expires_days must be 1..{MAX_EXPIRES_DAYS}")
    repo = TokenRepository(session)
    if repo.name_taken(name):
        raise TokenNameTaken(f"a token named {name!r} exists (names of revoked tokens are not reused)")
    expires_at = utcnow() + timedelta(days=expires_days) if expires_days else None
    for _attempt in range(3):  # a prefix collision (32 random bits) is improbable; retry with a new token
        token, prefix = new_token()
        try:
            with session.begin_nested():
                row = repo.add(NewToken(name, scope, prefix, hasher.digest(token), hasher.key_id, expires_at))
        except IntegrityError:
            if repo.name_taken(name):
                raise TokenNameTaken(f"a token named {name!r} exists") from None
            continue
        return row, token
    raise RuntimeError("could not draw an unused token prefix in 3 attempts")


def list_tokens(session: Session) -> list[ApiToken]:
    return TokenRepository(session).all()


def revoke_token(session: Session, name: str) -> ApiToken:
    repo = TokenRepository(session)
    token = repo.by_name(name)
    if token is None:
        raise TokenNotFound(f"no token named {name!r}")
    repo.revoke(token)
    return token


def tokens_required(session: Session) -> bool:
    """Whether requests need a token: once any unrevoked token exists (expired ones included)."""
    return TokenRepository(session).any_unrevoked()


def verify_token(session: Session, hasher: TokenHasher, presented: str) -> Principal:
    """The principal of a presented token, or Unauthorized. Records the use (see LAST_USED_RESOLUTION)."""
    digest = hasher.digest(presented)  # computed for every presented token, found or not
    prefix = prefix_of(presented)
    repo = TokenRepository(session)
    row = repo.credentials_by_prefix(prefix) if prefix else None
    if row is None or not hmac.compare_digest(digest, row.token_hash):
        if row is not None and row.key_id != hasher.key_id:
            log.warning(
                "token %r was created under another key (key id %s, this process uses %s): check that "
                "FP8_POLICY_SECRET_KEY is the same for the service and the `token` CLI",
                row.name,
                row.key_id,
                hasher.key_id,
            )
        raise InvalidToken("the access token is not valid for this service", invalid_token=True)
    now = utcnow()
    if row.revoked_at is not None:
        raise TokenRevoked(f"the access token {row.name!r} was revoked", invalid_token=True)
    if is_expired(row.expires_at, now):
        raise TokenExpired(
            f"the access token {row.name!r} expired at {row.expires_at:%Y-%m-%d %H:%M} UTC", invalid_token=True
        )
    if row.last_used_at is None or row.last_used_at < now - LAST_USED_RESOLUTION:
        repo.touch(row.id, now, now - LAST_USED_RESOLUTION)
    return Principal(name=row.name, scope=row.scope, expires_at=row.expires_at)
