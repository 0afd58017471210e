"""Response models of GET /api/v1/compare (two runs), /compare/runs, /compare/series and /compare/scalars (2-8 runs).

They mirror `service.compare.pair.compare_runs()`, `service.compare.actions` (and
`policy.compare.runs.compare_verdicts`) key by key: a key added there reaches clients only once it is declared here
too (tests/service/app/test_response_models.py fails, naming the key, when a real response loses one).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from fp8_policy.policy.records import LayerGroup
from fp8_policy.policy.thresholds import Severity
from fp8_policy.policy.vocabulary import LayerStatus
from fp8_policy.service.analysis.schemas import FindingBrief, HistoryRead, MovedProblemRead
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


# ------------------------------------------------------------------------------------------- two runs: /compare
class RunRef(ApiModel):
    id: int
    name: str | None


class Change(ApiModel):
    """A number in both runs; `relative` = (head − base) / base. null where a side has no value, and below the
    noise floor (base under 0.05 points of underflows%: compare `change`, in points)."""

    base: float | None
    head: float | None
    change: float | None
    relative: float | None
    below_noise_floor: bool = Field(False, description="The base is too small for a relative change.")


class TensorChange(ApiModel):
    """One tensor's underflows% in a layer (worst rank, post-warm-up window)."""

    level: Change
    max: Change
    mean: Change
    last: Change


class TensorChanges(ApiModel):
    gradient: TensorChange
    activation: TensorChange
    weight: TensorChange


class TextPair(ApiModel):
    base: str | None
    head: str | None


class StatusPair(ApiModel):
    base: LayerStatus | None
    head: LayerStatus | None


class SeverityPair(ApiModel):
    """The layer's verdict in each run; null when it is not in that run or was not assessed there (n/a: BF16,
    no FP8 stats)."""

    base: Severity | None
    head: Severity | None


class CountPair(ApiModel):
    base: int
    head: int


class LayerComparison(ApiModel):
    model_config = {**ApiModel.model_config, "populate_by_name": True}

    name: str = Field(description="Exact layer name as logged; layers match by it.")
    group: LayerGroup
    index: int | None
    sublayer: str | None
    in_: Literal["both", "base", "head"] = Field(alias="in", description="Which runs have the layer.")
    precision: TextPair
    status: StatusPair
    status_changed: bool
    severity: SeverityPair
    stats: TensorChanges


class GroupChange(Change):
    layers: int | None = Field(description="Layers observed in both runs the means are over; null with basis 'each'.")
    basis: Literal["both", "each"] = Field(
        description="'both': the layers observed in both runs; 'each': each run's own layers (no layer in common)."
    )


class GroupChanges(ApiModel):
    gradient: GroupChange
    activation: GroupChange
    weight: GroupChange


class GroupComparison(ApiModel):
    group: LayerGroup
    layers: int
    moved_to_bf16: list[str]
    moved_to_fp8: list[str]
    bf16: CountPair = Field(description="Layers in BF16 in each run.")
    stats: GroupChanges = Field(description="Mean of the group's layer levels, per tensor.")


class PrecisionChange(ApiModel):
    layer: str
    group: LayerGroup
    base: LayerStatus | None
    head: LayerStatus | None


class Unmatched(ApiModel):
    only_in_base: list[str]
    only_in_head: list[str]


class SkipLayersChange(ApiModel):
    base: list[str]
    head: list[str]
    added: list[str]
    removed: list[str]


class OverridesChange(ApiModel):
    base: list[dict[str, Any]]
    head: list[dict[str, Any]]
    added: list[dict[str, Any]]
    removed: list[dict[str, Any]]
    changed: list[dict[str, Any]] = Field(description="layer, base GEMMs, head GEMMs.")


class RecommendationsComparison(ApiModel):
    """Both runs' recommendations; the head's takes the base run as its history (`head_history`)."""

    skip_layers: SkipLayersChange
    gemm_overrides: OverridesChange
    recipe: dict[str, Any] = Field(description="base/head recipe names and labels, changed.")
    expected_cost: dict[str, Any] = Field(
        description="bf16_gemm_share, gemm_slowdown_vs_all_fp8_pct, gemm_speedup_vs_all_bf16: base/head."
    )
    confidence: dict[str, Any]
    policy_version: str
    same: bool
    summary: list[str]
    head_history: HistoryRead | None


class CompareRead(ApiModel):
    """`GET /api/v1/compare`."""

    base: RunRef
    head: RunRef
    comparable: bool = Field(description="False when the runs have no layer in common (said first in notes).")
    common_layers: int
    moved_problems: list[MovedProblemRead] = Field(description="Findings that followed a moved BF16 boundary.")
    recommendations: RecommendationsComparison | None = Field(None, description="Absent when incomparable.")
    layers: list[LayerComparison]
    groups: list[GroupComparison]
    precision_changes: list[PrecisionChange]
    findings_appeared: list[FindingBrief]
    findings_disappeared: list[FindingBrief]
    unmatched: Unmatched
    notes: list[str]
    summary: list[str] = Field(description="Sentences such as 'body gradient underflow −34% (mean 1.20% → 0.79%)'.")
