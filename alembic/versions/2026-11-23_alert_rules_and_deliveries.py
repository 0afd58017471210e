"""alerts: per-project webhook rules and the delivery log"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from fp8_policy.db import migration_ops

revision = "alerts"
down_revision = "live_runs"


def upgrade() -> None:
    op.create_table(
        "alert_rules",
        migration_ops.id_column(),
        sa.Column("project", sa.String(length=200), nullable=False),
        sa.Column("webhook_url", sa.String(length=2000), nullable=False),
        sa.Column("format", sa.String(length=16), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("min_severity", sa.String(length=16), nullable=False),
        sa.Column("cooldown_seconds", sa.Integer(), nullable=False),
        migration_ops.timestamp("created_at"),
        sa.Column("created_by", sa.String(length=100), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_rules")),
    )
    op.create_index(op.f("ix_alert_rules_project"), "alert_rules", ["project"], unique=False)
    op.create_table(
        "alert_deliveries",
        migration_ops.id_column(),
        sa.Column("rule_id", sa.Integer(), nullable=True),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("project", sa.String(length=200), nullable=False),
        sa.Column("event_id", sa.Integer(), nullable=True),
        sa.Column("event", sa.JSON(), nullable=False),
        sa.Column("dedupe_key", sa.String(length=1000), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        migration_ops.timestamp("next_attempt_at"),
        migration_ops.timestamp("lease_until", nullable=True),
        migration_ops.timestamp("created_at"),
        migration_ops.timestamp("sent_at", nullable=True),
        sa.ForeignKeyConstraint(
            ["rule_id"], ["alert_rules.id"], name=op.f("fk_alert_deliveries_rule_id_alert_rules"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_alert_deliveries_run_id_runs"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_deliveries")),
    )
    op.create_index("ix_alert_deliveries_status_next", "alert_deliveries", ["status", "next_attempt_at"], unique=False)
    op.create_index("ix_alert_deliveries_rule_key", "alert_deliveries", ["rule_id", "dedupe_key"], unique=False)
    op.create_index(op.f("ix_alert_deliveries_run_id"), "alert_deliveries", ["run_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_alert_deliveries_run_id"), table_name="alert_deliveries")
    op.drop_index("ix_alert_deliveries_rule_key", table_name="alert_deliveries")
    op.drop_index("ix_alert_deliveries_status_next", table_name="alert_deliveries")
    op.drop_table("alert_deliveries")
    op.drop_index(op.f("ix_alert_rules_project"), table_name="alert_rules")
    op.drop_table("alert_rules")
