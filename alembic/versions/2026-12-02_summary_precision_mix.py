"""run_summaries.precision_mix, run_summaries.gemm_speedup

The runs list shows each run's precision mix (layers per recommended precision, the recommendation's
`headline.precision_mix`) and its one GEMM speedup over all-BF16 from the stored summary; NULL for summaries
computed before these columns (recomputed with the next policy version).
"""

from __future__ import annotations

import sqlalchemy as sa

from fp8_policy.db import migration_ops

revision = "summary_precision_mix"
down_revision = "run_parallel"


upgrade, downgrade = migration_ops.added_columns("run_summaries", precision_mix=sa.JSON(), gemm_speedup=sa.Float())
