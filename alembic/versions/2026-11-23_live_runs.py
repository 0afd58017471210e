"""live runs: received log files with offsets, detector state, early-warning events

Revision ID: live_runs
Revises: run_summaries
Create Date: 2026-11-23 06:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "live_runs"
down_revision = "run_summaries"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "live_files",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("path", sa.String(length=500), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("parsed_offset", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_live_files_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "path", name=op.f("pk_live_files")),
    )
    op.create_table(
        "live_state",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_live_state_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_live_state")),
    )
    op.create_table(
        "live_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
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
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_live_events_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_live_events")),
    )
    op.create_index("ix_live_events_run_id_id", "live_events", ["run_id", "id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_live_events_run_id_id", table_name="live_events")
    op.drop_table("live_events")
    op.drop_table("live_state")
    op.drop_table("live_files")
