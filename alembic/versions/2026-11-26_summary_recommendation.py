"""run_summaries.recommendation

The default-options recommendation stored with the run's summary (GET /recommendation without options serves it);
NULL for summaries computed before this column or for runs whose metadata the recommender cannot read.
"""

from __future__ import annotations

import sqlalchemy as sa

from fp8_policy.db import migration_ops

revision = "summary_recommendation"
down_revision = "run_notes"


upgrade, downgrade = migration_ops.added_columns("run_summaries", recommendation=sa.JSON())
