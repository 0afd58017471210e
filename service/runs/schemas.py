"""API shapes of runs, layers and series (never ORM classes).

Non-finite numbers: JSON has no NaN/inf, so values and summaries carry them as the strings
"NaN", "Infinity" and "-Infinity" (Python's float() reads all three back).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from fp8_policy.db.run_models import RunStatus

Number = float | Literal["NaN", "Infinity", "-Infinity"] | None


class Schema(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class RunRead(Schema):
    id: int
    name: str | None
    project: str
    tags: list[str]
    status: RunStatus
    error: str | None = Field(description="Why ingest failed: '<Code>: <detail>'.")
    sha256: str
    upload_filename: str | None
    upload_bytes: int
    metadata: dict[str, Any]
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    ranks: int = Field(description="Number of ranks with statistics (data-parallel replicas included).")
    ranks_stored: int = Field(
        description="Ranks whose series are stored: a rank whose statistics equal a stored rank's under global "
        "layer names (a data-parallel replica) is stored once; asking for it by `rank` answers with that rank's."
    )
    layer_count: int
    series_count: int
    points: int = Field(description="Stored (iteration, value) points after de-duplication.")
    iteration_min: int | None
    iteration_max: int | None
    lines_read: int = Field(description="Lines read from statistics logs.")
    lines_skipped: int = Field(description="Non-blank lines that are not statistics lines.")
    lines_blank: int
    lines_duplicated: int = Field(description="Points dropped because a later line had the same name and iteration.")
    ingest_report: dict[str, Any] | None = Field(None, description="Per-file counts and skipped-line samples.")
    uploaded_by: str | None = Field(
        None, description="Name of the access token that uploaded the run; null when the service was open (no token)."
    )
    notes: str | None = Field(None, description="The run's notes (a description, multi-line text); null when none.")
    training_run: dict[str, str] | None = Field(
        None, description='Its experiment-tracker run: {"kind": "mlflow" | "wandb", "ref", "url"}; null when none.'
    )
    summary: RunSummaryRead | None = Field(
        None,
        description="Stored summary of a ready run (runs list only); null "
        "while it is being computed for the current policy version.",
    )


class RunEdit(BaseModel):
    """A PATCH of a run: each field left out is kept as it is."""

    model_config = ConfigDict(extra="forbid")

    notes: str | None = Field(
        None,
        description="The run's notes (multi-line text, tabs and line breaks kept); null or blank clears them.",
    )
    tags: list[str] | None = Field(
        None,
        description="The run's tags, replacing the present ones (blank ones dropped, duplicates once); [] clears them.",
    )
    training_run: dict[str, Any] | None = Field(
        None,
        description='The experiment-tracker run this run belongs to: {"kind": "mlflow" | "wandb", "ref": the MLflow '
        'run id or the W&B entity/project/run, "url": its http(s) page}; null removes the link.',
    )


class DuplicateOf(Schema):
    """The earlier run of the same project that already holds an upload's bytes."""

    id: int
    name: str | None


class RunUploaded(RunRead):
    """The answer to an upload: the run, and `duplicate_of` when the bytes were known."""

    duplicate_of: DuplicateOf | None = Field(
        None,
        description="Set when this project already held these bytes: the answer is that earlier run, under its own "
        "name, tags and metadata (this upload's name and fields are not applied, nothing is stored twice); "
        "null for a new run.",
    )


class RunSummaryRead(Schema):
    """The stored summary of a ready run (service/analysis/summary.py), computed once per policy version."""

    severity: Literal["ok", "warning", "critical", "severe"] = Field(description="Worst finding's severity.")
    pattern: str | None = Field(description="The leading (worst) finding's pattern; null when none.")
    label: str | None = Field(None, description="Human name of that pattern, e.g. 'U-shape'; null when none.")
    headline: str | None = Field(description="That finding's one-sentence summary.")
    to_bf16: int = Field(description="Layers the default recommendation keeps in BF16 (fp8_skip_layers).")
    gemm_overrides: int = Field(description="Layers with per-GEMM overrides in the default recommendation.")
    precision_mix: dict[str, int] | None = Field(
        None, description="GEMM layers per recommended precision (the recommendation's headline.precision_mix)."
    )
    gemm_speedup: float | None = Field(None, description="The recommendation's GEMM speedup over all-BF16.")
    policy_version: str


class RunList(Schema):
    items: list[RunRead]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page; null on the last page.")


class StatSummary(Schema):
    tensor: str
    stat: str = Field(description="Stat as logged after the tensor, e.g. 'underflows%' or 'mxfp8_underflows%'.")
    base_stat: str
    recipe: str | None
    columnwise: bool
    min: float | None
    max: float | None
    mean: float | None
    last: float | None
    p95: float | None
    count: int
    nan_count: int
    inf_count: int
    ranks: int


class LayerRead(Schema):
    name: str = Field(description="Exact layer name as logged.")
    group: Literal["embedding", "body", "head", "other"]
    index: int | None = Field(description="Block number as logged (1-based under TE's layer_number).")
    sublayer: str | None
    precision: Literal["fp8", "high", "mixed", "unknown"]
    fp8: bool | None = Field(description="Ran in FP8 per plan lines (true), in high precision (false), unknown (null).")
    has_fp8_stats: bool
    plans: dict[str, str] = Field(description="'tensor/gemm' -> plan line text, merged over ranks.")
    stats: list[StatSummary]


class SeriesPoints(Schema):
    rank: int
    iterations: list[int]
    values: list[Number]


class SeriesRead(Schema):
    layer: str
    tensor: str
    stat: str
    series: list[SeriesPoints]
