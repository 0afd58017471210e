"""Response models of GET /api/v1/compare/runs, /compare/series and /compare/scalars (2-8 runs).

They mirror `service.visual.compare_runs` (and `policy.compare.runs.compare_verdicts`) key by key: a key added
there reaches clients only once it is declared here too.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from fp8_policy.policy.records import LayerGroup
from fp8_policy.policy.thresholds import Severity
from fp8_policy.service.schema_base import ApiModel, Number


class ComparedFinding(ApiModel):
    pattern: str
    label: str = Field(description="Human name of the pattern, e.g. 'U-shape'.")
    severity: Severity
    layers: int = Field(description="How many layers the finding names.")
    summary: str


class ComparedRun(ApiModel):
    """One run of the comparison, in the order asked for (the first is the reference)."""

    id: int
    name: str | None
    project: str
    tags: list[str]
    status: str
    created_at: datetime
    ranks: int | None
    layer_count: int | None
    points: int | None
    iteration_min: int | None
    iteration_max: int | None
    severity: Severity = Field(description="The worst finding's severity (ok without findings).")
    findings: list[ComparedFinding]
    trained_recipe: str | None = Field(description="The recipe the run trained with, as its logs say.")
    recommendation_note: str | None = Field(description="Why the run has no recommendation (null: it has one).")


class VerdictRow(ApiModel):
    """One row of the side-by-side table: `values` has one entry per run, in run order."""

    key: str = Field(
        description="severity, findings, trained_recipe, ran_bf16, recipe, to_bf16, gemm_overrides, ladder, "
        "bf16_gemm_share, gemm_slowdown_vs_all_fp8_pct, gemm_speedup_vs_all_bf16, confidence."
    )
    label: str
    values: list[Any] = Field(description="Per run; null where the run has none (e.g. no recommendation).")
    differs: bool = Field(description="Not the same in every run (sets compare as sets, numbers rounded as shown).")
    matches_first: list[bool] = Field(description="Per run: the same as in the first run (the reference).")


class LayerCell(ApiModel):
    logged: str = Field(description="The layer's precision as logged: fp8, fp8_unobserved or bf16.")
    recommended: str | None = Field(
        description="The precision the run's recommendation gives it: bf16, 'bf16 gemms' (the GEMMs in `gemms` in "
        "BF16), or a recipe / ladder rung (delayed, current, block, mxfp8, nvfp4); null without a recommendation."
    )
    gemms: list[str] | None
    severity: Severity | None = Field(description="The layer's verdict; null when not assessed (BF16, no stats).")


class LayerPrecisionRow(ApiModel):
    name: str = Field(description="Exact layer name as logged; layers match by it.")
    group: LayerGroup
    index: int | None
    sublayer: str | None
    cells: list[LayerCell | None] = Field(description="Per run, in run order; null: the run has no such layer.")
    differs: bool = Field(description="A run lacks the layer, or the runs log or recommend different precisions.")
    notable: bool = Field(description="Ran in BF16, or is recommended another precision than the recipe, somewhere.")


class Focus(ApiModel):
    layer: str
    tensor: str
    stat: str


class MetricCount(ApiModel):
    tensor: str
    stat: str
    runs: int = Field(description="How many of the runs logged this (tensor, stat) for some layer.")


class CompareRunsRead(ApiModel):
    """`GET /api/v1/compare/runs`."""

    runs: list[ComparedRun]
    table: list[VerdictRow]
    layers: list[LayerPrecisionRow] = Field(description="Every layer of any run, in model order.")
    common_layers: int = Field(description="Layers every run has.")
    shared_layers: int = Field(0, description="Layers at least two of the runs have (compared where present).")
    comparable: bool = Field(description="False when no two runs have a layer in common (said first in `summary`).")
    focus: Focus | None = Field(description="What the overlay shows first: the worst run's worst layer and stat.")
    metrics: list[MetricCount]
    summary: list[str]
    policy_version: str


class OverlayRun(ApiModel):
    id: int
    name: str | None
    points: int = Field(description="Points the run logged for this metric (before any grouping).")
    missing: str | None = Field(description="Why the run has no line, e.g. 'no loss recorded'; null: it has one.")
    values: list[Number | None] = Field(description="One per entry of `iterations`; null: not logged there.")


class ScalarOverlayRun(OverlayRun):
    recorded: list[str] = Field(description="The training scalars the run recorded (loss, grad_norm, ...).")


class CompareSeriesRead(ApiModel):
    """`GET /api/v1/compare/series`: one layer's stat of every run on one iteration axis."""

    layer: str
    tensor: str
    stat: str
    iterations: list[int] = Field(description="The union of the runs' iterations (a group's first when grouped).")
    grouped: int = Field(description="1: every iteration as logged; n: a point is the mean of up to n iterations.")
    runs: list[OverlayRun]


class CompareScalarsRead(ApiModel):
    """`GET /api/v1/compare/scalars`: one training scalar of every run on one step axis."""

    name: str
    iterations: list[int] = Field(description="The union of the runs' steps (a group's first when grouped).")
    grouped: int
    runs: list[ScalarOverlayRun]
