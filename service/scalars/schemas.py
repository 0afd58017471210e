"""API shapes of a run's training scalars (`GET /api/v1/live/runs/{run_id}/scalars`)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ScalarSeries(BaseModel):
    steps: list[int]
    values: list[float]


class ScalarsRead(BaseModel):
    run_id: int
    records: int = Field(description="Scalar records returned (the last `limit` ones).")
    unreadable_lines: int = Field(0, description="Lines of the scalars file that are not a JSON object with `step`.")
    negative_steps: int = Field(0, description="Records left out for a `step` below 0 (training steps count from 0).")
    series: dict[str, ScalarSeries] = Field(description="loss, grad_norm, param_norm, lr, tokens_per_s, mem_gb.")
