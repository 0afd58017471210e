"""runs.meta_gpu, runs.meta_recipe, runs.meta_te_version, runs.meta_git_commit, runs.training_run; run_configs

runs.training_run: the experiment-tracker run (MLflow, W&B) a run belongs to, {"kind", "ref", "url"}.

run_configs: rendered configs kept with their run, versioned per format, with the policy version and options of the
recommendation they came from (db/run_config_models.py).


The runs list filters by the GPU, recipe, TE version and git commit a run's metadata names (`?gpu=H100`), in one
spelling (policy/run_facets.py `run_facets`: "NVIDIA H100 80GB HBM3" and "h100" are both `h100`), so a filter is
a plain comparison on both databases instead of reading every run's JSON. Existing runs get theirs from their
stored metadata here; new runs when their row is written. Indexes with the id for the two equality filters (the
list is newest first).

The backfill calls `run_facets` as it is when this migration runs: a later change of that spelling applies to
runs stored after it.
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

from fp8_policy.db import migration_ops
from fp8_policy.policy.run_facets import MAX_FACET_CHARS, run_facets

revision = "run_facets_configs"
down_revision = "experiments"

COLUMNS = ("meta_gpu", "meta_recipe", "meta_te_version", "meta_git_commit")
BATCH = 500


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        for column in COLUMNS:
            batch_op.add_column(sa.Column(column, sa.String(length=MAX_FACET_CHARS), nullable=True))
        batch_op.add_column(sa.Column("training_run", sa.JSON(), nullable=True))
        batch_op.create_index("ix_runs_meta_gpu_id", ["meta_gpu", "id"], unique=False)
        batch_op.create_index("ix_runs_meta_recipe_id", ["meta_recipe", "id"], unique=False)
    _backfill(op.get_bind())
    op.create_table(  # migration_ops.create_run_table's shape, with ids never reused on SQLite either
        "run_configs",
        migration_ops.id_column(),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("format", sa.String(length=32), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("filename", sa.String(length=255), nullable=False),
        sa.Column("media_type", sa.String(length=100), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("policy_version", sa.String(length=32), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("recommendation_sha256", sa.String(length=64), nullable=False),
        migration_ops.timestamp("created_at"),
        sa.Column("created_by", sa.String(length=100), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_run_configs_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_configs")),
        sa.UniqueConstraint("run_id", "format", "version", name=op.f("uq_run_configs_run_id_format_version")),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_run_configs_run_id_id", "run_configs", ["run_id", "id"], unique=False)


def _backfill(bind: sa.Connection) -> None:
    runs = sa.table("runs", sa.column("id", sa.Integer()), sa.column("metadata", sa.Text()))
    update = sa.text(
        "UPDATE runs SET meta_gpu = :gpu, meta_recipe = :recipe, meta_te_version = :te_version,"
        " meta_git_commit = :git_commit WHERE id = :id"
    )
    after = 0
    while True:
        # the JSON column read as text on both databases (SQLite stores text, PostgreSQL's json casts to it)
        rows = bind.execute(
            sa.select(runs.c.id, sa.cast(runs.c.metadata, sa.Text()))
            .where(runs.c.id > after)
            .order_by(runs.c.id)
            .limit(BATCH)
        ).all()
        if not rows:
            return
        values = []
        for run_id, text in rows:
            try:
                metadata = json.loads(text) if text else {}
            except ValueError:
                metadata = {}
            facets = run_facets(metadata if isinstance(metadata, dict) else {})
            if any(facets.values()):
                values.append({"id": run_id, **facets})
        if values:
            bind.execute(update, values)
        after = rows[-1][0]


def downgrade() -> None:
    op.drop_index("ix_run_configs_run_id_id", table_name="run_configs")
    op.drop_table("run_configs")
    with op.batch_alter_table("runs", schema=None, table_kwargs={"sqlite_autoincrement": True}) as batch_op:
        batch_op.drop_index("ix_runs_meta_recipe_id")
        batch_op.drop_index("ix_runs_meta_gpu_id")
        batch_op.drop_column("training_run")
        for column in reversed(COLUMNS):
            batch_op.drop_column(column)
