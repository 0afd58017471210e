"""runs.parallel

The job's parallel layout as the ingest resolved it (policy/parallel/info.py `ParallelInfo.to_json`): sizes, where
they came from, the naming convention of the logs, each rank's coordinates, replicas stored once, mismatches and
notes. NULL for runs ingested before this column (read as an unknown layout).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "run_parallel"
down_revision = "ids_never_reused"


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("parallel", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("parallel")
