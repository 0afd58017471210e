"""runs.notes

A run's editable description (PATCH /api/v1/runs/{id}), plain text; NULL when none was written.

Revision ID: run_notes
Revises: alerts
Create Date: 2026-11-26 19:05:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "run_notes"
down_revision = "alerts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("notes", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("notes")
