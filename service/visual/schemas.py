"""Response models of `GET /api/v1/runs/{run_id}/heatmap.json` and `GET /api/v1/compare`.

They mirror `service.visual.actions.heatmap_layout()` and `service.visual.compare.compare_runs()` key by key.
FastAPI filters every response through its model, so a key added to those dicts reaches clients only once it is
declared here too: extend these models together with the code that builds the dict.
tests/service/test_response_models.py fails, naming the key, when a real response loses one.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from fp8_policy.policy.records import GEMMS, LayerGroup, Precision
from fp8_policy.policy.thresholds import Severity
from fp8_policy.policy.vocabulary import ROW_BF16, ROW_DATA, LayerStatus
from fp8_policy.service.analysis.schemas import FindingBrief, HistoryRead, MovedProblemRead
from fp8_policy.service.schema_base import ApiModel

Gemm = Literal[GEMMS]  # type: ignore[valid-type]


# ----------------------------------------------------------------------------------------------- heatmap.json
class HeatmapRowRead(ApiModel):
    label: str = Field(description="The row's label as drawn.")
    layer: str = Field(description="Exact layer name as logged.")
    group: LayerGroup
    kind: Literal[ROW_DATA, ROW_BF16] = Field(  # type: ignore[valid-type]
        description=f"'{ROW_DATA}': the row has points; '{ROW_BF16}': the layer ran in high precision (hatched)."
    )
    precision: Precision
    level: float | None = Field(description="p95 of the row's finite points; null without data.")
    severity: Severity | None = Field(
        None,
        description="The analysis's verdict of this row's series (the one findings, the layer table and gate use); "
        "null when the analysis has none for the drawn stat or rank.",
    )
    boxed: bool = Field(description="Boxed as one of the worst rows at or above the critical band.")
    skip: bool = Field(description="In the recommended skip set.")
    gemm_override: list[Gemm] | None = Field(description="GEMMs the recommendation keeps in high precision.")
    recommended: str | None = Field(
        None,
        description="The precision the recommendation runs this layer at (its headline.precision_by_layer: the "
        "ladder's rung, bf16 for the BF16 set); null without a recommendation or for a non-GEMM row.",
    )


class HeatmapIterations(ApiModel):
    first: int
    last: int
    count: int


class HeatmapSummaryRead(ApiModel):
    """The numbers of the heatmap's summary box."""

    components: int = Field(description="Rows with data.")
    bf16_rows: int
    max: float | None
    mean: float | None
    critical: int | None = Field(
        description="Rows whose verdict (`boxed_by`) is at or above the critical band; null for stats that are "
        "not percentages and have no verdict."
    )
    critical_threshold: float | None
    boxed: list[int] = Field(description="Indices into `rows`, worst first.")
    boxed_by: Literal["analysis verdict", "row level"] = Field(
        "row level",
        description="'analysis verdict': rows' `severity` decided (the run's analysis); 'row level': the p95 of all "
        "points (a live run, a single rank, or a stat the analysis does not band).",
    )


class HeatmapImageRead(ApiModel):
    """Pixel geometry of the image the same parameters would render (heatmap.png / .svg)."""

    width_px: int
    height_px: int
    extent_px: list[float] = Field(description="x0, y0, x1, y1 of the cells in image pixels, origin top-left.")


class HeatmapCellsRead(ApiModel):
    """The cell values (`?cells=N`): rows as in `rows`, at most N columns each averaging consecutive iterations."""

    first: list[int] = Field(description="First iteration of each column.")
    last: list[int] = Field(description="Last iteration of each column.")
    values: list[list[float | None]] = Field(description="Per row, per column; null: not logged there.")


class HeatmapLayoutRead(ApiModel):
    """`GET /api/v1/runs/{run_id}/heatmap.json`."""

    run_id: int
    tensor: str
    stat: str
    rank: int | None = Field(
        description="null: every rank, the maximum over ranks per iteration (a parallel job's tensor-parallel shards "
        "first combined with their statistic's rule, as the analysis reads them)."
    )
    sublayer: str | None
    vmax: float = Field(description="Top of the colour scale.")
    rows: list[HeatmapRowRead] = Field(description="Top to bottom, in model order.")
    iterations: HeatmapIterations
    summary: HeatmapSummaryRead
    skip_layers: list[str] | None = Field(description="The recommended skip set; null with show_skip=false.")
    recommended_recipe: str | None = Field(
        None, description="The recommended recipe; rows whose `recommended` precision differs are marked."
    )
    image: HeatmapImageRead
    cells: HeatmapCellsRead | None = Field(None, description="The values, with `?cells=N`; null otherwise.")
    colormap: list[str] = Field(description="The image's colour map from 0 to `vmax`, as evenly spaced #rrggbb.")


# ----------------------------------------------------------------------------------------------------- compare
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
