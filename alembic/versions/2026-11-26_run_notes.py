"""runs.notes

A run's editable description (PATCH /api/v1/runs/{id}), plain text; NULL when none was written.
"""

from __future__ import annotations

import sqlalchemy as sa

from fp8_policy.db import migration_ops

revision = "run_notes"
down_revision = "alerts"


upgrade, downgrade = migration_ops.added_columns("runs", notes=sa.Text())
