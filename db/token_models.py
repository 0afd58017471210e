"""ORM classes of access: API tokens (their keyed hashes, scopes, use and revocation) and the service's shared
secrets. Written and read by db/tokens.py."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import CheckConstraint, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from fp8_policy.db.base import Base, UTCDateTime


class ApiToken(Base):
    """An access token: only its keyed hash (HMAC-SHA256, service/auth/tokens.py) is stored, never the token.

    `prefix` is the token's public, random lookup part (shown by `fp8-policy token list`); names are never
    reused, so a run's `uploaded_by` always names one token, revoked or not.
    """

    __tablename__ = "api_tokens"
    __table_args__ = (CheckConstraint("scope IN ('read', 'upload', 'admin')", name="scope"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    scope: Mapped[str] = mapped_column(String(16))
    prefix: Mapped[str] = mapped_column(String(32), unique=True)
    token_hash: Mapped[str] = mapped_column(String(64))
    key_id: Mapped[str] = mapped_column(String(16))  # which hashing key made token_hash (see service/auth/tokens.py)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class ServiceSecret(Base):
    """Secrets the service generates once and every process on the database shares (the token hashing key)."""

    __tablename__ = "service_secrets"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
