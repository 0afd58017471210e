"""ids never reused on SQLite: runs, live_events, ingest_jobs and alert_rules get AUTOINCREMENT

Without AUTOINCREMENT SQLite gives a new row the largest id in the table plus one, so deleting the newest row
hands its id to the next one (https://www.sqlite.org/autoinc.html). These ids name things that outlive the row:
a run's id its storage folder (runs/<id>/) and the cached images and recommendations keyed by it; an event's id
the alert deliveries kept after their run is deleted (`alert_deliveries.event_id`); a job's id the leases a worker
still holds for a deleted run; a rule's id what an admin removes (`fp8-policy alert remove <id>`).

`runs` was created with AUTOINCREMENT (0001), but a batch rebuild of it (the downgrades of run_notes and
api_tokens) drops the keyword, since table options are not reflected; this puts it back for such databases too.
Each table is rebuilt in batch mode (new table, copy, drop, rename; alembic/env.py turns foreign keys off for
it), keeping its columns, indexes, foreign keys, constraints and rows; a table that already has AUTOINCREMENT is
left alone. An id deleted before this migration cannot be recovered: the counter starts at the largest id left.
PostgreSQL's sequences never hand out a value twice, so there is nothing to do there.

The downgrade keeps AUTOINCREMENT: removing it would only bring back the reuse, and no earlier revision reads it.
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

revision = "ids_never_reused"
down_revision = "summary_recommendation"

TABLES = ("runs", "live_events", "ingest_jobs", "alert_rules")


def _has_autoincrement(bind: sa.Connection, table: str) -> bool:
    sql = bind.execute(
        sa.text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = :name"), {"name": table}
    ).scalar_one()
    return re.search(r"\bAUTOINCREMENT\b", sql, re.IGNORECASE) is not None


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return
    for table in TABLES:
        if _has_autoincrement(bind, table):
            continue
        with op.batch_alter_table(table, recreate="always", table_kwargs={"sqlite_autoincrement": True}):
            pass


def downgrade() -> None:
    pass
