## branch_labels and depends_on are left out: alembic reads them with getattr(module, ..., None) (Script in
## alembic/script/base.py); the file name carries the date (file_template in alembic.ini). Shared table shapes (a
## table owned by a run, the id column, timestamps) are in fp8_policy.db.migration_ops.
"""${message}
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
${imports if imports else ""}

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    ${downgrades if downgrades else "pass"}
