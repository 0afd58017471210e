"""runs.notes

A run's editable description (PATCH /api/v1/runs/{id}), plain text; NULL when none was written.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "run_notes"
down_revision = "alerts"


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("notes", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("notes")
