"""api tokens, service secrets, runs.uploaded_by

Access tokens (stored as keyed hashes), the generated token-hashing key, and which token uploaded a run.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from fp8_policy.db import migration_ops

revision = "api_tokens"
down_revision = "0001"


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        migration_ops.id_column(),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("prefix", sa.String(length=32), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("key_id", sa.String(length=16), nullable=False),
        migration_ops.timestamp("created_at"),
        migration_ops.timestamp("last_used_at", nullable=True),
        migration_ops.timestamp("expires_at", nullable=True),
        migration_ops.timestamp("revoked_at", nullable=True),
        sa.CheckConstraint("scope IN ('read', 'upload', 'admin')", name=op.f("ck_api_tokens_scope")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("name", name=op.f("uq_api_tokens_name")),
        sa.UniqueConstraint("prefix", name=op.f("uq_api_tokens_prefix")),
    )
    op.create_table(
        "service_secrets",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.String(length=200), nullable=False),
        migration_ops.timestamp("created_at"),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_service_secrets")),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("uploaded_by", sa.String(length=100), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("uploaded_by")

    op.drop_table("service_secrets")
    op.drop_table("api_tokens")
