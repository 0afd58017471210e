"""Response models of the recommendation's speed/risk frontier, target and verification (policy/recommend/frontier.py,
policy/recommend/target.py, policy/recommend/verification.py); RecommendationRead (schemas.py) holds them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fp8_policy.service.schema_base import ApiModel


class LayerChangeRead(ApiModel):
    layer: str
    from_: str = Field(alias="from")
    to: str


class FrontierPointRead(ApiModel):
    speedup: float = Field(description="GEMM-time speedup over all-BF16 GEMMs (the ladder's cost model).")
    predicted_risk: float = Field(description="Nats per step: see predicted_risk_definition.")
    layers_changed: list[LayerChangeRead] = Field(description="Moves from the previous point (toward cheaper).")


class FrontierChosenRead(ApiModel):
    source: Literal["recommendation", "target"]
    speedup: float
    predicted_risk: float | None = Field(description="Null when a low-precision layer has no sensitivity logged.")
    frontier_point: int | None = None
    spec: str | None = None
    met: bool | None = None


class FrontierBaselineRead(ApiModel):
    name: Literal["last_15pct", "last_n_nvidia", "first_last", "all_low"]
    rule: str
    speedup: float
    predicted_risk: float | None
    bf16_layers: list[str]


class FrontierRead(ApiModel):
    """Every per-layer precision mix worth considering, all-BF16 first, with the rules on the same axes."""

    available: bool = Field(description="False when the run has no loss-sensitivity statistics (no points).")
    reason: str | None = None
    risk_unit: str
    predicted_risk_definition: str
    low_precision: str = Field(
        description="The run's own low precision (its training recipe, else the recommended one): the rules' other "
        "layers run in it."
    )
    points: list[FrontierPointRead]
    chosen: FrontierChosenRead
    baselines: list[FrontierBaselineRead]
    unmeasured_layers: list[str]


class TargetRead(ApiModel):
    """`?target=speedup:<x>|risk:<x>`: the frontier point chosen and what it changed."""

    spec: str
    kind: Literal["speedup", "risk"]
    value: float
    met: bool
    frontier_point: int
    point_speedup: float
    point_predicted_risk: float | None
    speedup: float = Field(description="As applied (GEMM overrides the target kept included).")
    predicted_risk: float | None
    layers_changed: list[LayerChangeRead]


class MeasuredArmRead(ApiModel):
    experiment_id: int
    name: str
    kind: str
    heldout_gap: float | None = Field(description="Held-out loss minus the BF16 arm's, nats; null when it diverged.")
    gap_se: float | None = Field(
        default=None, description="Standard error of the gap over replicates; null with one replicate."
    )
    gemm_speedup: float | None = None
    predicted_risk: float | None = None


class LiftRead(ApiModel):
    layer: str
    from_: str = Field(alias="from")
    to: str
    predicted_risk: float | None = None


class NextStepRead(ApiModel):
    text: str
    lift: list[LiftRead]
    rerun: list[str] = Field(description="The arms to run again (same steps, seed and data order).")


class VerdictFields(ApiModel):
    """The fields of an experiment's verdict (policy/recommend/verification.py `verify`), declared once for its two
    views: the recommendation's `verification` (VerificationRead) and the experiment's own (service/experiments/
    schemas.py ExperimentVerdictRead). Each view narrows `status` or `experiment_id` in place (pydantic keeps an
    overridden field where the base declared it, so the field order is the verdict's)."""

    status: str
    experiment_id: int | None
    detail: str
    recommended_gap: float | None = None
    predicted_gap: float | None = None
    best_rule_gap: float | None = None
    tolerance: float | None = None
    replicates: int | None = Field(
        default=None, description="Replicates the verdict was judged over (paired: replicate r of every arm)."
    )
    noise_bound: float | None = Field(
        default=None,
        description="One-sided 95 % Student-t bound on the recommended arm's mean gap (t(0.95, R-1) x SE, nats): "
        "contradicted only beyond it; 0 with one replicate.",
    )
    best_rule_noise_bound: float | None = Field(
        default=None, description="The same bound on the paired differences to the best rule arm."
    )
    recommended_gap_se: float | None = Field(
        default=None, description="Standard error of the recommended arm's mean gap; null with one replicate."
    )
    next_step: NextStepRead | None = None


class VerificationRead(VerdictFields):
    """The newest experiment's verdict on the recommended arm (policy/recommend/verification.py)."""

    status: Literal["confirmed", "contradicted", "unverified"]
    measured: list[MeasuredArmRead] = Field(default_factory=list)
