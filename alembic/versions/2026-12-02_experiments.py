"""experiments: short training arms posted to a run (POST /api/v1/runs/{id}/experiments), with their verdict"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from fp8_policy.db import migration_ops

revision = "experiments"
down_revision = "summary_precision_mix"


def upgrade() -> None:
    migration_ops.create_run_table(
        "experiments",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("steps", sa.Integer(), nullable=False),
        sa.Column("uploaded_by", sa.String(length=100), nullable=True),
        sa.Column("body", sa.JSON(), nullable=False),
        migration_ops.timestamp("created_at"),
    )
    op.create_index("ix_experiments_run_id_id", "experiments", ["run_id", "id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_experiments_run_id_id", table_name="experiments")
    op.drop_table("experiments")
