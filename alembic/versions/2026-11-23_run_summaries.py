"""run summaries: the stored default analysis and list columns of each ready run, per policy version"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from fp8_policy.db import migration_ops

revision = "run_summaries"
down_revision = "ingest_jobs"


def upgrade() -> None:
    migration_ops.create_run_table(
        "run_summaries",
        sa.Column("policy_version", sa.String(length=32), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("pattern", sa.String(length=32), nullable=True),
        sa.Column("headline", sa.Text(), nullable=True),
        sa.Column("to_bf16", sa.Integer(), nullable=False),
        sa.Column("gemm_overrides", sa.Integer(), nullable=False),
        sa.Column("analysis", sa.JSON(), nullable=False),
        migration_ops.timestamp("computed_at"),
        key=("run_id",),
    )


def downgrade() -> None:
    op.drop_table("run_summaries")
