"""ingest jobs: a queue of plan / rank / finalize jobs with leases"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from fp8_policy.db import migration_ops

revision = "ingest_jobs"
down_revision = "api_tokens"


def upgrade() -> None:
    migration_ops.create_run_table(
        "ingest_jobs",
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=True),
        migration_ops.timestamp("lease_until", nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        migration_ops.timestamp("created_at"),
        unique=("run_id", "kind", "rank"),
    )
    op.create_index("ix_ingest_jobs_status_id", "ingest_jobs", ["status", "id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_ingest_jobs_status_id", table_name="ingest_jobs")
    op.drop_table("ingest_jobs")
