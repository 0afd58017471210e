"""run_summaries.recommendation

The default-options recommendation stored with the run's summary (GET /recommendation without options serves it);
NULL for summaries computed before this column or for runs whose metadata the recommender cannot read.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "summary_recommendation"
down_revision = "run_notes"


def upgrade() -> None:
    with op.batch_alter_table("run_summaries", schema=None) as batch_op:
        batch_op.add_column(sa.Column("recommendation", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("run_summaries", schema=None) as batch_op:
        batch_op.drop_column("recommendation")
