"""Response models of the analysis and recommendation endpoints (`GET .../analysis`, `GET|POST .../recommendation`).

They mirror `policy.analysis.Analysis.to_dict()` and `policy.recommend.Recommendation.to_dict()` field by field.
FastAPI filters every response through its model, so a key the policy code adds to those dicts reaches clients
only once it is declared here as well: extend these models together with the `to_dict()` you change.
tests/service/app/test_response_models.py fails, naming the key, when a real response loses one.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, create_model

from fp8_policy.policy.records import GEMMS, PRECISIONS, RECIPE_CLASSES, LayerGroup, Precision
from fp8_policy.policy.thresholds import Severity
from fp8_policy.policy.vocabulary import LayerStatus, Pattern
from fp8_policy.service.analysis.cost_schemas import ExpectedCostRead, HeadlineRead, PrecisionLadderRead
from fp8_policy.service.analysis.frontier_schemas import FrontierRead, TargetRead, VerificationRead
from fp8_policy.service.analysis.parallel_schemas import ParallelRead, PipelineRead
from fp8_policy.service.analysis.schedule_schemas import SchedulePhaseRead
from fp8_policy.service.schema_base import ApiModel, threshold_fields

Gemm = Literal[GEMMS]  # type: ignore[valid-type]
RecipeName = Literal[tuple(RECIPE_CLASSES)]  # type: ignore[valid-type]
PrecisionName = Literal[PRECISIONS]  # type: ignore[valid-type]

ThresholdsRead = create_model(  # one field per policy.thresholds.Thresholds field, with its comment as description
    "ThresholdsRead",
    __base__=ApiModel,
    __doc__="Every threshold the analysis used (defaults or overrides).",
    **threshold_fields(),
)


class EvidenceRead(ApiModel):
    """Numbers behind a finding for one (layer, tensor, stat[, recipe][, rank]) series."""

    layer: str = Field(description="Exact layer name as logged.")
    metric: str = Field(description="'<tensor> <recipe_><stat>', e.g. 'gradient underflows%'.")
    tensor: str
    stat: str
    recipe: str | None
    rank: int | None = Field(description="The rank the numbers come from; null: worst rank per point.")
    window: list[int] | None = Field(description="[first, last] iteration of the analysed post-warm-up range.")
    level_window: list[int] | None = Field(description="[first, last] iteration the level is taken from.")
    level: float | None
    max: float | None
    mean: float | None
    last: float | None
    slope_per_1k: float | None = Field(description="Robust trend slope per 1,000 iterations.")
    start_level: float | None = Field(description="Median of the first third of the window.")
    end_level: float | None = Field(description="Median of the last third of the window.")
    projected_value: float | None
    ratio: float | None = Field(description="Largest scale jump factor, outlier score, what-if ratio, ...")
    reference: float | None = Field(description="What the value is compared to (peers' or other ranks' median).")
    onset: int | None
    projected_iteration: int | None
    crossing_iteration: int | None = Field(description="Where a projected trend reaches the critical band.")
    count: int | None = Field(description="Events: scale jumps, outlier features, ...")


class FindingBrief(ApiModel):
    """A finding without its evidence (recommendation and compare responses)."""

    pattern: Pattern
    label: str = Field(description="Human name of the pattern, e.g. 'U-shape'.")
    severity: Severity
    layers: list[str] = Field(description="Exact layer names as logged.")
    summary: str


class FindingRead(FindingBrief):
    """One detected pattern with its numeric evidence."""

    evidence: list[EvidenceRead]


class SeriesVerdictRead(ApiModel):
    """The one assessment of one (tensor, stat) series of a layer; every view reads its severity from here."""

    tensor: str
    stat: str = Field(description="Canonical stat (the training recipe's prefix dropped), e.g. 'underflows%'.")
    severity: Severity
    level: float | None = Field(description="The level the severity comes from (p95 of the trailing window).")
    assessed: bool = Field(description="False: left out of the assessment (see `reason`); its raw values decide.")
    reason: str | None = Field(description="Why not assessed: 'stuck scale', 'warm-up' or 'non-finite'.")


class FocusRead(ApiModel):
    """The series of the worst finding: the view to open first."""

    layer: str
    tensor: str
    stat: str = Field(description="The stat key as logged (what `heatmap?stat=` takes).")
    severity: Severity
    pattern: Pattern


class LayerAssessmentRead(ApiModel):
    """One row of the per-layer table. Underflow numbers are the worst rank's, over the post-warm-up window."""

    name: str = Field(description="Exact layer name as logged.")
    group: LayerGroup
    index: int | None = Field(description="Block number as logged.")
    sublayer: str | None
    precision: Precision = Field(description="From the metadata plan lines.")
    status: LayerStatus = Field(description="fp8 (observed), fp8_unobserved, bf16 or ignored.")
    severity: Severity = Field(description="The worst of the layer's series verdicts ('ok' when not assessed).")
    verdict: Literal["n/a", "ok", "warning", "critical", "severe"] = Field(
        description="The severity, or 'n/a' when nothing of this layer was assessed (BF16, no FP8 stats)."
    )
    series: list[SeriesVerdictRead] = Field(description="One verdict per (tensor, stat) series of the layer.")
    worst_signal: str | None = Field(description="e.g. 'gradient underflows%'.")
    worst_level: float | None
    patterns: list[Pattern]
    gradient_underflow_max: float | None
    gradient_underflow_mean: float | None
    gradient_underflow_last: float | None
    activation_underflow_max: float | None
    activation_underflow_mean: float | None
    activation_underflow_last: float | None
    weight_underflow_max: float | None
    weight_underflow_mean: float | None
    weight_underflow_last: float | None


class AnalysisStats(ApiModel):
    """Counts, windows and rules of the analysis."""

    n_series: int
    n_series_used: int
    ranks: list[int]
    iterations: list[int | None] = Field(description="[first, last] logged iteration.")
    warmup_cut_iteration: float
    warmup_rule: str
    level_rule: str
    median_points_per_series: float
    layers_by_status: dict[LayerStatus, int]
    body_blocks: int
    index_base: int = Field(description="0 or 1: how the log numbers its blocks.")
    censored_scale_fraction: float = Field(description="Share of scale_inv points printed as 0.0000 (< 5e-5).")
    nonfinite_points: int
    warmup_only_series: int
    stat_prefix: str | None = Field(
        None, description="The training recipe's stat prefix (e.g. 'mxfp8'); series verdicts name stats without it."
    )
    rank_outlier_series_excluded: int


class TrainingRecipeRead(ApiModel):
    """The recipe the run trained with, as the analysis read it (analysis/formats.py)."""

    recipe: RecipeName | None = Field(description="None: unknown (no metadata, nothing in the stats says).")  # type: ignore[valid-type]
    source: str = Field(description="From the metadata, or how the stats show it.")
    e8m0_scale_series: int = Field(description="MXFP8 scale_inv series read as E8M0 bytes (2^(v-127)).")
    excluded_scale_points: int = Field(description="Impossible scale_inv values left out (named in `notes`).")
    te_scale_inv_min_zeros: int = Field(
        0,
        description="MXFP8/NVFP4 scale_inv_min zeros of a TE before 2.17 left out: a TE bug (TE #3041), not a signal.",
    )
    layer_recipes: dict[str, RecipeName] = Field(  # type: ignore[valid-type]
        default_factory=dict,
        description="Mixed-format runs: layers that trained in another recipe than the run's, read from their own "
        "statistics (nvfp4_ vs bare names, E8M0 scale bytes) or the metadata's layer_recipes.",
    )


class AnalysisRead(ApiModel):
    """`GET /api/v1/runs/{run_id}/analysis`."""

    run_id: int
    focus: FocusRead | None = Field(description="The series of the worst finding (open the heatmap on it).")
    findings: list[FindingRead] = Field(description="Worst first; `healthy` alone when nothing was found.")
    layers: list[LayerAssessmentRead] = Field(description="The per-layer table, in model order.")
    thresholds: ThresholdsRead
    stats: AnalysisStats
    notes: list[str] = Field(description="Caveats: rounding, non-finite values, missing stats.")
    training_recipe: TrainingRecipeRead
    parallel: ParallelRead | None = Field(
        None, description="The job's parallel layout (TP, PP, DP, ...); null for a run stored without one."
    )


class GemmOverrideRead(ApiModel):
    layer: str = Field(description="Exact layer name as logged.")
    gemms: list[Gemm] = Field(description="GEMMs of this layer kept in high precision.")
    reason: str


class RecipeRead(ApiModel):  # type: ignore[no-redef]  # pydantic.mypy adds `**kwargs` to __init__ (populate_by_name), clashing with the `kwargs` field
    """The Transformer Engine recipe to train with."""

    model_config = {**ApiModel.model_config, "populate_by_name": True}

    name: RecipeName  # type: ignore[valid-type]
    label: str = Field(description="Human name, e.g. 'Current scaling (Float8CurrentScaling)'.")
    class_path: str = Field(alias="class", description="e.g. transformer_engine.common.recipe.DelayedScaling")
    kwargs: dict[str, Any] = Field(description="Keyword arguments of the recipe class (fp8_format, ...).")
    reason: str
    evidence: str | None = Field(
        None,
        description="What drove the choice: 'what-if stats', 'logged stats: ...', 'previous run: ...', or "
        "'none: recipe kept'. A switch is recommended only on evidence.",
    )
    current: str | None = Field(
        None,
        description="What the run trained in: its recipe, or 'bf16' for a run that trained in high precision "
        "(what-if stats only; the recommended recipe is then a change of precision).",
    )
    changed_from: str | None = Field(
        None, description="What the run trained in ('bf16' for a high-precision run) when the recipe changes it."
    )
    apply_paths: dict[str, str] | None = Field(
        None,
        description="Apply path (te-yaml, megatron) -> whether it keeps the BF16 layers with this recipe; empty "
        "when no transformer-block layer is in BF16.",
    )


class MegatronRead(ApiModel):
    """The policy as Megatron-LM arguments (`extra_args` is the command-line form)."""

    first_last_layers_bf16: bool
    num_layers_at_start_in_bf16: int
    num_layers_at_end_in_bf16: int
    fp8_recipe: str | None = Field(description="Megatron's --fp8-recipe; null for NVFP4 (FP4 flags instead).")
    fp8_format: Literal["e4m3", "hybrid"] | None
    fp4_format: Literal["e2m1"] | None = None
    fp4_recipe: Literal["nvfp4"] | None = None
    extra_args: list[str]
    blocks_needing_precision_config: list[int] = Field(
        description="0-based blocks that need a TE precision config file (not covered by first/last)."
    )
    precision_config_also_hits: list[int] | None = Field(
        None,
        description="Pipeline parallel: other 0-based global blocks the precision config's globs hit (a glob sees "
        "each stage's local block index).",
    )
    notes: list[str]


class GemmSetRead(ApiModel):
    layer: str = Field(description="Exact layer name as logged.")
    gemms: list[Gemm] = Field(description="GEMMs of this layer the format keeps in BF16.")


class FormatAppliedRead(ApiModel):
    """What one rendered format really keeps in BF16: at least the recommendation's set (issue 12 item 1)."""

    bf16_layers: list[str] = Field(description="Layers the format runs wholly in BF16.")
    bf16_gemms: list[GemmSetRead] = Field(description="Layers of which only some GEMMs run in BF16.")
    overrides_as_whole_layers: list[str] = Field(
        description="GEMM overrides the format can only apply as the whole layer in BF16."
    )
    extra_bf16_layers: list[str] = Field(
        description="Layers in BF16 beyond the recommendation (safe-side approximation, e.g. Hydra's whole blocks)."
    )
    not_applied: list[str] = Field(description="Requested layers the format cannot keep in BF16 (stated).")
    exact: bool
    approximation: str | None = Field(
        description="The one-line statement at the top of the rendered file; null when exact."
    )


class MovedProblemRead(ApiModel):
    """A finding that reappeared at the same place relative to a BF16 edge that moved between two runs."""

    pattern: Pattern
    label: str
    side: Literal["start", "end"]
    distance_from_edge: int = Field(description="0: the FP8 block right next to the BF16 edge.")
    base_layers: list[str]
    head_layers: list[str]
    base_blocks: list[int]
    head_blocks: list[int]
    base_bf16_edge_blocks: int
    head_bf16_edge_blocks: int
    tensor: str | None
    base_level: float | None
    head_level: float | None
    summary: str


class HistoryRead(ApiModel):
    """What the previous run (`previous_run`) changes about this recommendation."""

    previous_run: int | str | None
    moved_problems: list[MovedProblemRead]
    added_bf16_blocks: dict[str, list[int]] = Field(description="Side -> blocks in BF16 in this run only.")
    advice: list[str]


class RecommendationRead(ApiModel):
    """`GET|POST /api/v1/runs/{run_id}/recommendation` with `format=json`."""

    run_id: int
    headline: HeadlineRead | None = Field(None, description="The answer in one record: what every view shows.")
    fp8_skip_layers: list[str] = Field(description="Layers to run entirely in BF16 (exact logged names).")
    gemm_overrides: list[GemmOverrideRead]
    kept_bf16: list[str] = Field(
        default_factory=list,
        description="Layers that ran in BF16 in this run and stay in BF16 (every format and apply_policy keep them "
        "there; not in fp8_skip_layers, which lists the layers the recommendation moves).",
    )
    precision_ladder: PrecisionLadderRead | None = Field(
        None, description="Per-layer precisions beside fp8_skip_layers / gemm_overrides (which stay for old clients)."
    )
    fp8_param: bool = Field(False, description="The run keeps FP8/FP4 parameters (metadata fp8_param[_gather]).")
    recipe: RecipeRead
    megatron: MegatronRead
    formats: dict[str, FormatAppliedRead] = Field(
        description="Per rendered format (te-yaml, megatron, hydra, torchao): the BF16 set it applies."
    )
    expected_cost: ExpectedCostRead
    rationale: list[str]
    confidence: float = Field(description="How much the evidence supports the policy, from 0.05 to 1.")
    policy_version: str = Field(description="Changes whenever a rule changes.")
    findings: list[FindingBrief]
    history: HistoryRead | None = Field(None, description="Set when `previous_run` was given.")
    parallel: PipelineRead | None = Field(
        None, description="The job's parallel layout as apply_policy needs it on one stage; null without one."
    )
    schedule: list[SchedulePhaseRead] | None = Field(
        None,
        description="Precision that changes over the run (a late failure, a projected one, the LR decay with NVFP4): "
        "phases from a step on, each rendered on its own with `phase=K`; null when the policy holds throughout.",
    )
    frontier: FrontierRead | None = Field(None, description="The speed/risk frontier with the rules on it.")
    target: TargetRead | None = Field(None, description="Set when `target` was given.")
    verification: VerificationRead | None = Field(None, description="Set once an experiment was posted.")
