"""Response models of `POST|GET /api/v1/runs/{id}/experiments` (service/experiments/actions.py `read`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from fp8_policy.service.analysis.frontier_schemas import VerdictFields
from fp8_policy.service.schema_base import ApiModel


class ArmRead(ApiModel):
    name: str
    kind: str
    steps: int
    heldout_loss: float | None = Field(
        description="Null when the arm diverged (NaN or infinite loss); with replicates the mean of heldout_losses."
    )
    heldout_losses: list[float | None] | None = Field(
        default=None,
        description="One held-out loss per replicate (replicate r of every arm under the same seed); null entries "
        "diverged. Absent without replicates.",
    )
    diverged: bool
    step_time_s: float
    train_loss: float | None = None
    rule: str | None = None
    frontier_point: int | None = None
    default_precision: str | None = None
    precisions: dict[str, str] | None = None
    bf16_gemms: dict[str, list[str]] | None = None
    heldout_gap: float | None = Field(description="Held-out loss minus the bf16 arm's (nats).")
    heldout_gaps: list[float | None] | None = Field(
        default=None, description="Per replicate: this arm's held-out loss minus the bf16 arm's of the same replicate."
    )
    gap_se: float | None = Field(
        default=None, description="Standard error of the mean gap over replicates (null: one replicate or diverged)."
    )
    gemm_speedup: float | None = Field(description="On the run's frontier: GEMM-time speedup over all-BF16.")
    predicted_risk: float | None = Field(description="On the run's frontier: nats per step (null: not placeable).")


class ExperimentVerdictRead(VerdictFields):
    status: str = Field(description="confirmed | contradicted | unverified (policy/recommend/verification.py).")
    experiment_id: int


class ExperimentRead(ApiModel):
    id: int
    run_id: int
    name: str
    steps: int
    uploaded_by: str | None
    created_at: datetime
    setup: dict[str, Any]
    seed: int | None = None
    seeds: list[int] | None = Field(default=None, description="The replicate seeds, when the arms carry replicates.")
    tolerance: float | None = None
    arms: list[ArmRead]
    verification: ExperimentVerdictRead
