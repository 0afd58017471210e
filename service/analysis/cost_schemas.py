"""Response models of a recommendation's one answer as the views read it: its cost (`expected_cost`, the ladder's
view of it), the per-layer precision ladder and the headline (policy/recommend/cost.py, ladder_record.py,
headline.py). Part of `RecommendationRead` (service/analysis/schemas.py), kept apart to keep both modules small."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fp8_policy.policy.records import PRECISIONS
from fp8_policy.service.schema_base import ApiModel

PrecisionName = Literal[PRECISIONS]  # type: ignore[valid-type]


class LadderSpeedupRead(ApiModel):
    vs_bf16: float
    measured_on: str


class ExpectedCostRead(ApiModel):
    """The answer's one cost (every layer at the precision it runs at, one speedup table). Only `method`,
    `bf16_gemm_share` and `gemm_share` are always present."""

    method: Literal["dims", "layer_count"] = Field(description="FLOP weights from model dims, or one per layer.")
    gemm_share: dict[Literal["fp4", "fp8", "bf16"], float] = Field(description="Shares of GEMM FLOPs per class.")
    bf16_gemm_share: float
    bf16_gemm_share_as_logged: float | None = None
    moved_to_bf16_share: float | None = None
    fp8_recipe: str | None = None
    fp8_gemm_speedup: float | None = None
    speedup_measured_on: str | None = None
    gemm_time_vs_all_fp8: float | None = None
    gemm_slowdown_vs_all_fp8_pct: float | None = None
    gemm_speedup_vs_all_bf16: float | None = None
    gemm_time_vs_as_logged: float | None = None
    as_logged_recipe: str | None = None
    speedups: dict[PrecisionName, LadderSpeedupRead] | None = None
    source: str | None = None
    assumptions: str | None = None
    gemm_flops_per_sequence: float | None = None
    missing_dims_for: list[str] | None = None
    note: str | None = None


class LadderRungRead(ApiModel):
    """One layer of the precision ladder."""

    precision: PrecisionName
    evidence: list[str] = Field(description="The stats / what-ifs / assumptions that decided it.")
    confidence: float = Field(description="0-1: lower where evidence was missing or inferred.")


class LadderCostRead(ApiModel):
    """The answer's cost as the ladder counts it: the same figures as `expected_cost` (its source there)."""

    method: Literal["dims", "layer_count"]
    gemm_share: dict[Literal["fp4", "fp8", "bf16"], float]
    gemm_speedup_vs_all_bf16: float | None = None
    gemm_time_vs_as_logged: float | None = None
    as_logged_recipe: str | None = None
    speedups: dict[PrecisionName, LadderSpeedupRead] | None = None
    source: str | None = None
    assumptions: str | None = None
    missing_dims_for: list[str] | None = None
    note: str | None = None


class PrecisionLadderRead(ApiModel):
    """Per layer the cheapest precision it tolerates (nvfp4, mxfp8, block, current, delayed, bf16)."""

    layers: dict[str, LadderRungRead] = Field(description="Exact layer name -> its rung.")
    counts: dict[PrecisionName, int]
    assumptions: list[str]
    lifted: list[str] = Field(
        default_factory=list,
        description="Layers failing NVFP4 by underflow only that the ladder lifts to an FP8 rung (not to BF16); "
        "they leave fp8_skip_layers, their evidence says so.",
    )
    expected_cost: LadderCostRead | None = None


class HeadlineRead(ApiModel):
    """The answer in one record, the one every view reads (policy/recommend/headline.py)."""

    recipe: str = Field(description="The recommended (outer) recipe.")
    recipe_label: str
    precision_mix: dict[PrecisionName, int] = Field(description="GEMM layers per recommended precision.")
    precision_by_layer: dict[str, PrecisionName] = Field(
        description="Every GEMM layer -> the precision the answer runs it at (its ladder rung, bf16 for the BF16 "
        "set, the recipe for a layer without stats), as apply_policy's TE backend applies it."
    )
    to_bf16: int = Field(description="Layers moved to BF16 (fp8_skip_layers).")
    kept_bf16: int = Field(description="Layers that ran in BF16 and stay there (kept_bf16).")
    gemm_overrides: int = Field(description="Layers with single GEMMs in BF16.")
    lifted: int = Field(description="Layers failing NVFP4 lifted to an FP8 rung instead of BF16.")
    gemm_speedup_vs_all_bf16: float | None = Field(description="The answer's one GEMM speedup (expected_cost).")
    text: str = Field(description="One sentence: the recipe, the mix, what moves to BF16 and the speedup.")
