"""runs.parallel

The job's parallel layout as the ingest resolved it (policy/parallel/info.py `ParallelInfo.to_json`): sizes, where
they came from, the naming convention of the logs, each rank's coordinates, replicas stored once, mismatches and
notes. NULL for runs ingested before this column (read as an unknown layout).
"""

from __future__ import annotations

import sqlalchemy as sa

from fp8_policy.db import migration_ops

revision = "run_parallel"
down_revision = "ids_never_reused"


upgrade, downgrade = migration_ops.added_columns("runs", parallel=sa.JSON())
