"""API shapes of access tokens: who am I, a token as listed, the create body and its one-time answer."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from fp8_policy.service.auth.actions import MAX_EXPIRES_DAYS


class Me(BaseModel):
    name: str | None = Field(description="The token's name; null when the service is open (no token exists).")
    scope: Literal["read", "upload", "admin"]
    anonymous: bool
    expires_at: datetime | None


class TokenRead(BaseModel):
    name: str
    scope: Literal["read", "upload", "admin"]
    prefix: str = Field(description="The token's public beginning, e.g. fp8p_1a2b3c4d.")
    state: Literal["active", "expired", "revoked"]
    created_at: datetime
    last_used_at: datetime | None = Field(description="Recorded at most once a minute.")
    expires_at: datetime | None
    revoked_at: datetime | None


class TokenCreate(BaseModel):
    name: str = Field(description="Unique; letters, digits, '.', '_', '@', '-'; at most 100 characters.")
    scope: Literal["read", "upload", "admin"]
    expires_days: int | None = Field(None, ge=1, le=MAX_EXPIRES_DAYS)


class TokenCreated(TokenRead):
    token: str = Field(description="The token itself: shown this once, stored only as a keyed hash.")
