"""run_summaries.precision_mix, run_summaries.gemm_speedup

The runs list shows each run's precision mix (layers per recommended precision, the recommendation's
`headline.precision_mix`) and its one GEMM speedup over all-BF16 from the stored summary; NULL for summaries
computed before these columns (recomputed with the next policy version).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "summary_precision_mix"
down_revision = "run_parallel"


def upgrade() -> None:
    with op.batch_alter_table("run_summaries", schema=None) as batch_op:
        batch_op.add_column(sa.Column("precision_mix", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("gemm_speedup", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("run_summaries", schema=None) as batch_op:
        batch_op.drop_column("gemm_speedup")
        batch_op.drop_column("precision_mix")
