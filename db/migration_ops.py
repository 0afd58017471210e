"""Table shapes the Alembic migrations (alembic/versions/) share, so each migration states only what is its own.

Belongs here: a helper that emits DDL through `alembic.op` and that more than one migration calls. A migration that
has run must build the same schema forever, so never change what an existing helper emits (its columns, names,
order): add a new helper or keyword instead. Not here: the ORM models (db/*models.py) or queries.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from alembic import op


def id_column() -> sa.Column[int]:
    """The autoincrement integer surrogate key `id`."""
    return sa.Column("id", sa.Integer(), autoincrement=True, nullable=False)


def timestamp(name: str, *, nullable: bool = False) -> sa.Column[object]:
    """A timezone-aware timestamp column (`created_at`, `updated_at`, ...)."""
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def create_run_table(
    name: str,
    *items: sa.Column[object] | sa.ForeignKeyConstraint,
    key: tuple[str, ...] = ("id",),
    unique: tuple[str, ...] = (),
) -> None:
    """`op.create_table` for a table whose rows belong to one run: an autoincrement `id` when `key` is ("id",),
    `run_id`, then `items` (columns, and foreign keys to tables other than runs), then the foreign key
    `fk_<name>_run_id_runs` (the rows are deleted with their run), the primary key `pk_<name>` over `key` and, when
    `unique` names columns, the unique constraint `uq_<name>_<columns>` over them."""
    op.create_table(
        name,
        *([id_column()] if key == ("id",) else []),
        sa.Column("run_id", sa.Integer(), nullable=False),
        *items,
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f(f"fk_{name}_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint(*key, name=op.f(f"pk_{name}")),
        *([sa.UniqueConstraint(*unique, name=op.f(f"uq_{name}_{'_'.join(unique)}"))] if unique else []),
    )


def added_columns(table: str, **types: sa.types.TypeEngine[object]) -> tuple[Callable[[], None], Callable[[], None]]:
    """`upgrade, downgrade` of a migration that only adds nullable columns to `table` (existing rows have no value
    for them), one a keyword: name=type, in order. The upgrade adds them in one batch (a table rebuild on SQLite),
    the downgrade drops them in reverse order in one batch, so the two cannot disagree about which columns the
    migration owns. Each upgrade builds new Column objects: Alembic attaches a column to the table it alters."""

    def upgrade() -> None:
        with op.batch_alter_table(table, schema=None) as batch_op:
            for name, type_ in types.items():
                batch_op.add_column(sa.Column(name, type_, nullable=True))

    def downgrade() -> None:
        with op.batch_alter_table(table, schema=None) as batch_op:
            for name in reversed(types):
                batch_op.drop_column(name)

    return upgrade, downgrade
