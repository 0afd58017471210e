"""run summaries: the stored default analysis and list columns of each ready run, per policy version

Revision ID: run_summaries
Revises: ingest_jobs
Create Date: 2026-11-23 06:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "run_summaries"
down_revision = "ingest_jobs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_summaries",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("policy_version", sa.String(length=32), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("pattern", sa.String(length=32), nullable=True),
        sa.Column("headline", sa.Text(), nullable=True),
        sa.Column("to_bf16", sa.Integer(), nullable=False),
        sa.Column("gemm_overrides", sa.Integer(), nullable=False),
        sa.Column("analysis", sa.JSON(), nullable=False),
        sa.Column("computed_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_run_summaries_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_run_summaries")),
    )


def downgrade() -> None:
    op.drop_table("run_summaries")
