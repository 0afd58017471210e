"""ORM classes: runs, their tags, layers and series (one row per rank × layer × tensor × stat).

A series row holds its summary in plain columns (queried in SQL) and its points as compact binary
arrays (db/codec.py), so a 6M-line log becomes ~1,600 rows, not 6M. Non-finite numbers: SQL has no
portable NaN/inf, so summaries cover finite points only and count the others; `last` is NULL with
`last_nonfinite` set when the last point was NaN/±inf.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from fp8_policy.db.base import Base, UTCDateTime
from fp8_policy.policy.records import MAX_LAYER_CHARS, MAX_STAT_CHARS, MAX_TENSOR_CHARS
from fp8_policy.policy.run_facets import MAX_FACET_CHARS


class RunStatus(StrEnum):
    """A run's lifecycle: `live` while a training job streams into it, `queued` -> `processing` -> `ready` or
    `failed` for an upload. Stored as its value in `runs.status` (a plain string column).

    Member names equal their values: a driver that dumps an Enum by name (psycopg 3 does,
    https://www.psycopg.org/psycopg3/docs/basic/adapt.html#enum-adaptation) writes the same text."""

    live = "live"
    queued = "queued"
    processing = "processing"
    ready = "ready"
    failed = "failed"


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        UniqueConstraint("project", "sha256"),
        Index("ix_runs_project_id", "project", "id"),
        Index("ix_runs_meta_gpu_id", "meta_gpu", "id"),
        Index("ix_runs_meta_recipe_id", "meta_recipe", "id"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str | None] = mapped_column(String(200))
    project: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(16), index=True)
    error: Mapped[str | None] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    upload_filename: Mapped[str | None] = mapped_column(String(500))
    upload_bytes: Mapped[int] = mapped_column(BigInteger)
    upload_path: Mapped[str] = mapped_column(String(1000))  # relative to the data directory
    run_metadata: Mapped[dict[str, Any]] = mapped_column("metadata", JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    rank_count: Mapped[int] = mapped_column(Integer, default=0)
    layer_count: Mapped[int] = mapped_column(Integer, default=0)
    series_count: Mapped[int] = mapped_column(Integer, default=0)
    point_count: Mapped[int] = mapped_column(BigInteger, default=0)
    iteration_min: Mapped[int | None] = mapped_column(BigInteger)
    iteration_max: Mapped[int | None] = mapped_column(BigInteger)
    lines_read: Mapped[int] = mapped_column(BigInteger, default=0)
    lines_skipped: Mapped[int] = mapped_column(BigInteger, default=0)
    lines_blank: Mapped[int] = mapped_column(BigInteger, default=0)
    lines_duplicated: Mapped[int] = mapped_column(BigInteger, default=0)
    ingest_report: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # per-file counts, skipped samples
    uploaded_by: Mapped[str | None] = mapped_column(String(100))  # the access token's name; NULL when anonymous
    notes: Mapped[str | None] = mapped_column(Text)  # the run's editable description (PATCH .../runs/{id})
    # the job's parallel layout as the ingest resolved it (policy/parallel/info.py ParallelInfo.to_json); NULL
    # for runs ingested before it was kept (an unknown layout). Deferred: it grows with the job's ranks (60 KB at
    # 1,024 ranks, ~1 MB at 16,384) and only the analysis and rank lookups read it, not every load of a run row.
    parallel: Mapped[dict[str, Any] | None] = mapped_column(JSON, deferred=True)
    # the metadata's GPU, recipe, TE version and git commit in the spelling the runs list filters by
    # (policy/run_facets.py `run_facets`), written with the row; NULL where the metadata does not say
    meta_gpu: Mapped[str | None] = mapped_column(String(MAX_FACET_CHARS))
    meta_recipe: Mapped[str | None] = mapped_column(String(MAX_FACET_CHARS))
    meta_te_version: Mapped[str | None] = mapped_column(String(MAX_FACET_CHARS))
    meta_git_commit: Mapped[str | None] = mapped_column(String(MAX_FACET_CHARS))
    # the experiment-tracker run this run belongs to: {"kind": "mlflow" | "wandb", "ref": its id or path, "url"}
    # (PATCH .../runs/{id}; `fp8-policy upload --mlflow-run-id / --wandb-run` sets it); NULL when none
    training_run: Mapped[dict[str, Any] | None] = mapped_column(JSON)

    tags: Mapped[list[RunTag]] = relationship(
        back_populates="run", cascade="all, delete-orphan", passive_deletes=True, lazy="selectin"
    )


class RunTag(Base):
    __tablename__ = "run_tags"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    tag: Mapped[str] = mapped_column(String(100), primary_key=True, index=True)

    run: Mapped[Run] = relationship(back_populates="tags", lazy="raise")


class Layer(Base):
    __tablename__ = "layers"
    __table_args__ = (UniqueConstraint("run_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(MAX_LAYER_CHARS))
    position: Mapped[int] = mapped_column(Integer)  # model order within the run
    group: Mapped[str] = mapped_column(String(16))
    layer_index: Mapped[int | None] = mapped_column(Integer)
    sublayer: Mapped[str | None] = mapped_column(String(MAX_LAYER_CHARS))
    precision: Mapped[str] = mapped_column(String(16))
    has_fp8_stats: Mapped[bool] = mapped_column(Boolean)
    plans: Mapped[dict[str, Any]] = mapped_column(JSON)  # {"tensor/gemm": plan} merged over ranks


class Series(Base):
    __tablename__ = "series"
    __table_args__ = (
        UniqueConstraint("run_id", "layer_id", "rank", "tensor", "stat_key"),
        Index("ix_series_run_id_tensor_stat_key", "run_id", "tensor", "stat_key"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    layer_id: Mapped[int] = mapped_column(ForeignKey("layers.id", ondelete="CASCADE"), index=True)
    rank: Mapped[int] = mapped_column(Integer)
    tensor: Mapped[str] = mapped_column(String(MAX_TENSOR_CHARS))
    stat_key: Mapped[str] = mapped_column(
        String(MAX_STAT_CHARS)
    )  # as logged after the tensor: mxfp8_underflows%_columnwise
    stat: Mapped[str] = mapped_column(String(MAX_STAT_CHARS))  # without recipe prefix / columnwise suffix
    recipe: Mapped[str | None] = mapped_column(String(32))
    columnwise: Mapped[bool] = mapped_column(Boolean)
    count: Mapped[int] = mapped_column(Integer)
    nan_count: Mapped[int] = mapped_column(Integer)
    posinf_count: Mapped[int] = mapped_column(Integer)
    neginf_count: Mapped[int] = mapped_column(Integer)
    min: Mapped[float | None] = mapped_column(Float(precision=53))
    max: Mapped[float | None] = mapped_column(Float(precision=53))
    mean: Mapped[float | None] = mapped_column(Float(precision=53))
    p95: Mapped[float | None] = mapped_column(Float(precision=53))
    last: Mapped[float | None] = mapped_column(Float(precision=53))
    last_nonfinite: Mapped[str | None] = mapped_column(String(9))  # NaN | Infinity | -Infinity
    first_iteration: Mapped[int | None] = mapped_column(BigInteger)
    last_iteration: Mapped[int | None] = mapped_column(BigInteger)
    iterations: Mapped[bytes] = mapped_column(LargeBinary)
    values: Mapped[bytes] = mapped_column(LargeBinary)


# The other tables live in modules of their own (db/<things>_models.py beside db/<things>.py); imported here so every
# table is on Base.metadata wherever the runs' tables are (alembic/env.py imports this module for that).
from fp8_policy.db.alert_models import AlertDelivery, AlertRule  # noqa: E402,F401
from fp8_policy.db.experiment_models import ExperimentRow  # noqa: E402,F401
from fp8_policy.db.job_models import IngestJob  # noqa: E402,F401
from fp8_policy.db.live_models import LiveEventRow, LiveFile, LiveState  # noqa: E402,F401
from fp8_policy.db.run_config_models import RunConfig  # noqa: E402,F401
from fp8_policy.db.summary_models import RunSummary  # noqa: E402,F401
from fp8_policy.db.token_models import ApiToken, ServiceSecret  # noqa: E402,F401
