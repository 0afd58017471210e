"""initial schema: runs, tags, layers, series"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from fp8_policy.db import migration_ops

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "runs",
        migration_ops.id_column(),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("project", sa.String(length=200), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("upload_filename", sa.String(length=500), nullable=True),
        sa.Column("upload_bytes", sa.BigInteger(), nullable=False),
        sa.Column("upload_path", sa.String(length=1000), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        migration_ops.timestamp("created_at"),
        migration_ops.timestamp("started_at", nullable=True),
        migration_ops.timestamp("finished_at", nullable=True),
        sa.Column("rank_count", sa.Integer(), nullable=False),
        sa.Column("layer_count", sa.Integer(), nullable=False),
        sa.Column("series_count", sa.Integer(), nullable=False),
        sa.Column("point_count", sa.BigInteger(), nullable=False),
        sa.Column("iteration_min", sa.BigInteger(), nullable=True),
        sa.Column("iteration_max", sa.BigInteger(), nullable=True),
        sa.Column("lines_read", sa.BigInteger(), nullable=False),
        sa.Column("lines_skipped", sa.BigInteger(), nullable=False),
        sa.Column("lines_blank", sa.BigInteger(), nullable=False),
        sa.Column("lines_duplicated", sa.BigInteger(), nullable=False),
        sa.Column("ingest_report", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sa.UniqueConstraint("project", "sha256", name=op.f("uq_runs_project_sha256")),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index("ix_runs_project_id", ["project", "id"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_status"), ["status"], unique=False)

    migration_ops.create_run_table(
        "layers",
        sa.Column("name", sa.String(length=500), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("group", sa.String(length=16), nullable=False),
        sa.Column("layer_index", sa.Integer(), nullable=True),
        sa.Column("sublayer", sa.String(length=500), nullable=True),
        sa.Column("precision", sa.String(length=16), nullable=False),
        sa.Column("has_fp8_stats", sa.Boolean(), nullable=False),
        sa.Column("plans", sa.JSON(), nullable=False),
        unique=("run_id", "name"),
    )
    migration_ops.create_run_table(
        "run_tags",
        sa.Column("tag", sa.String(length=100), nullable=False),
        key=("run_id", "tag"),
    )
    with op.batch_alter_table("run_tags", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_run_tags_tag"), ["tag"], unique=False)

    migration_ops.create_run_table(
        "series",
        sa.Column("layer_id", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("tensor", sa.String(length=100), nullable=False),
        sa.Column("stat_key", sa.String(length=200), nullable=False),
        sa.Column("stat", sa.String(length=200), nullable=False),
        sa.Column("recipe", sa.String(length=32), nullable=True),
        sa.Column("columnwise", sa.Boolean(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("nan_count", sa.Integer(), nullable=False),
        sa.Column("posinf_count", sa.Integer(), nullable=False),
        sa.Column("neginf_count", sa.Integer(), nullable=False),
        sa.Column("min", sa.Float(precision=53), nullable=True),
        sa.Column("max", sa.Float(precision=53), nullable=True),
        sa.Column("mean", sa.Float(precision=53), nullable=True),
        sa.Column("p95", sa.Float(precision=53), nullable=True),
        sa.Column("last", sa.Float(precision=53), nullable=True),
        sa.Column("last_nonfinite", sa.String(length=9), nullable=True),
        sa.Column("first_iteration", sa.BigInteger(), nullable=True),
        sa.Column("last_iteration", sa.BigInteger(), nullable=True),
        sa.Column("iterations", sa.LargeBinary(), nullable=False),
        sa.Column("values", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["layer_id"], ["layers.id"], name=op.f("fk_series_layer_id_layers"), ondelete="CASCADE"
        ),
        unique=("run_id", "layer_id", "rank", "tensor", "stat_key"),
    )
    with op.batch_alter_table("series", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_series_layer_id"), ["layer_id"], unique=False)
        batch_op.create_index("ix_series_run_id_tensor_stat_key", ["run_id", "tensor", "stat_key"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("series", schema=None) as batch_op:
        batch_op.drop_index("ix_series_run_id_tensor_stat_key")
        batch_op.drop_index(batch_op.f("ix_series_layer_id"))

    op.drop_table("series")
    with op.batch_alter_table("run_tags", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_tags_tag"))

    op.drop_table("run_tags")
    op.drop_table("layers")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_status"))
        batch_op.drop_index("ix_runs_project_id")

    op.drop_table("runs")
