"""ingest jobs: a queue of plan / rank / finalize jobs with leases

Revision ID: ingest_jobs
Revises: api_tokens
Create Date: 2026-11-23 05:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "ingest_jobs"
down_revision = "api_tokens"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ingest_jobs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_ingest_jobs_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ingest_jobs")),
        sa.UniqueConstraint("run_id", "kind", "rank", name=op.f("uq_ingest_jobs_run_id_kind_rank")),
    )
    op.create_index("ix_ingest_jobs_status_id", "ingest_jobs", ["status", "id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_ingest_jobs_status_id", table_name="ingest_jobs")
    op.drop_table("ingest_jobs")
