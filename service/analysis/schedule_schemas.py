"""Response models of a recommendation's `schedule`: phases of precision that change over a run.

They mirror `policy.recommend.schedule` phases as the recommendation JSON gives them (service/analysis/schemas.py
says why every key must be declared).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from fp8_policy.service.schema_base import ApiModel


class ScheduleTriggerRead(ApiModel):
    """A series a live run watches: reaching `level` raises `switch_now` for its phase."""

    layer: str
    tensor: str
    stat: str
    level: float


class SchedulePolicyRead(ApiModel):
    fp8_skip_layers: list[str]
    gemm_overrides: list[dict[str, Any]]
    layer_precisions: dict[str, str] = Field(description="Layers at another precision than the outer recipe.")


class SchedulePhaseRead(ApiModel):
    """One phase of a schedule: a whole policy from `from_step` on (a restart with its own configuration)."""

    from_step: int
    restart: bool
    reason: str
    policy: SchedulePolicyRead
    triggers: list[ScheduleTriggerRead]
    lr_decay: bool = Field(
        False,
        description="The phase starts at the learning-rate decay: a live run given this schedule and streaming its "
        "`lr` scalar raises `switch_now` when its own lr curve shows the decay (else at `from_step`).",
    )
