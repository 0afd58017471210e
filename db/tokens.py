"""All SQL about access tokens and service secrets. Repositories flush, they never commit (db/session.py).

Hashing, token format and scope rules live in `service/auth/`; this module stores and finds rows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, exists, select, update
from sqlalchemy.exc import IntegrityError

from fp8_policy.db.runs import utcnow
from fp8_policy.db.session import Repository
from fp8_policy.db.token_models import ApiToken, ServiceSecret


@dataclass(frozen=True, slots=True)
class NewToken:
    name: str
    scope: str
    prefix: str
    token_hash: str
    key_id: str
    expires_at: datetime | None


class TokenRepository(Repository):
    def add(self, new: NewToken) -> ApiToken:
        """Insert a token; raises IntegrityError when the name (or, improbably, the prefix) is taken."""
        token = ApiToken(**asdict(new), created_at=utcnow())  # NewToken's fields are columns of the same names
        self.session.add(token)
        self.session.flush()
        return token

    def credentials_by_prefix(self, prefix: str) -> Row[*tuple[Any, ...]] | None:
        """What checking a presented token needs, as a plain row: this runs on every API request, and a Core
        query on the session's connection costs a fraction of loading an ORM object."""
        table = ApiToken.__table__
        query = select(
            table.c.id,
            table.c.name,
            table.c.scope,
            table.c.token_hash,
            table.c.key_id,
            table.c.expires_at,
            table.c.revoked_at,
            table.c.last_used_at,
        ).where(table.c.prefix == prefix)
        return self.session.connection().execute(query).first()

    def by_name(self, name: str) -> ApiToken | None:
        return self.session.scalars(select(ApiToken).where(ApiToken.name == name)).first()

    def name_taken(self, name: str) -> bool:
        return bool(self.session.scalar(select(exists().where(ApiToken.name == name))))

    def all(self) -> list[ApiToken]:
        return list(self.session.scalars(select(ApiToken).order_by(ApiToken.id)))

    def any_unrevoked(self) -> bool:
        """True once any token exists that is not revoked (expired ones count: expiry never reopens a service)."""
        query = select(exists().where(ApiToken.__table__.c.revoked_at.is_(None)))
        return bool(self.session.connection().execute(query).scalar())

    def revoke(self, token: ApiToken) -> None:
        if token.revoked_at is None:
            token.revoked_at = utcnow()
            self.session.flush()

    def touch(self, token_id: int, now: datetime, not_since: datetime) -> None:
        """Set last_used_at = now unless it was already set at or after `not_since` (one write per interval)."""
        self.session.execute(
            update(ApiToken)
            .where(ApiToken.id == token_id)
            .where(ApiToken.last_used_at.is_(None) | (ApiToken.last_used_at < not_since))
            .values(last_used_at=now)
        )


class SecretRepository(Repository):
    def get_or_create(self, name: str, value: str) -> str:
        """The stored secret `name`, storing `value` first if there is none. Safe when several processes race:
        the loser's insert fails on the primary key and it reads the winner's value."""
        stored = self.session.get(ServiceSecret, name)
        if stored is not None:
            return stored.value
        try:
            with self.session.begin_nested():
                self.session.add(ServiceSecret(name=name, value=value, created_at=utcnow()))
        except IntegrityError:
            winner = self.session.scalars(select(ServiceSecret).where(ServiceSecret.name == name)).one()
            return winner.value
        return value
