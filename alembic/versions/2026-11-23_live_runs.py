"""live runs: received log files with offsets, detector state, early-warning events"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from fp8_policy.db import migration_ops

revision = "live_runs"
down_revision = "run_summaries"


def upgrade() -> None:
    migration_ops.create_run_table(
        "live_files",
        sa.Column("path", sa.String(length=500), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("parsed_offset", sa.BigInteger(), nullable=False),
        migration_ops.timestamp("updated_at"),
        key=("run_id", "path"),
    )
    migration_ops.create_run_table(
        "live_state",
        sa.Column("state", sa.JSON(), nullable=False),
        migration_ops.timestamp("updated_at"),
        key=("run_id",),
    )
    migration_ops.create_run_table(
        "live_events",
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("layer", sa.String(length=500), nullable=False),
        sa.Column("tensor", sa.String(length=100), nullable=False),
        sa.Column("stat", sa.String(length=200), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("iteration", sa.BigInteger(), nullable=False),
        sa.Column("value", sa.Float(precision=53), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        migration_ops.timestamp("created_at"),
    )
    op.create_index("ix_live_events_run_id_id", "live_events", ["run_id", "id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_live_events_run_id_id", table_name="live_events")
    op.drop_table("live_events")
    op.drop_table("live_state")
    op.drop_table("live_files")
