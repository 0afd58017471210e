"""API shapes of live runs: the create body, an append's answer, a live run's files and early-warning events."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from fp8_policy.policy.vocabulary import EVENT_KINDS


class LiveRunCreate(BaseModel):
    name: str | None = Field(None, description="Run name, e.g. the training job's name.")
    project: str = Field("default", description="Project the run belongs to.")
    tags: list[str] = Field(default_factory=list, description="Tags, as for uploads.")
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="Model dims, GPU, recipe, ... as for uploads (a JSON object)."
    )


class LiveEventRead(BaseModel):
    id: int
    kind: str = Field(
        description="One of policy/vocabulary.py EVENT_KINDS: "
        + " | ".join(EVENT_KINDS)
        + " (statistics: policy/live/events.py; training scalars: policy/live/scalar_events.py; a precision "
        "schedule's switch: policy/live/switch.py)."
    )
    severity: str
    layer: str
    tensor: str
    stat: str = Field(description="Stat as logged after the tensor, e.g. 'underflows%'.")
    rank: int
    iteration: int
    value: float | None
    message: str
    detail: dict[str, Any]
    created_at: str


class AppendRead(BaseModel):
    path: str
    size: int = Field(description="Bytes of this file received so far: the next piece starts here.")
    events: list[LiveEventRead] = Field(description="Early warnings raised by the new lines of this piece.")


class LiveFileRead(BaseModel):
    path: str
    kind: str = Field(description="stats | metadata | scalars")
    size: int
    parsed_offset: int = Field(description="Bytes of whole lines the detectors have read.")


class LiveRunRead(BaseModel):
    run_id: int
    status: str
    files: list[LiveFileRead] = Field(description="Received files (empty once finalized).")
    events: list[LiveEventRead] = Field(description="Events after `after` (ids ascending).")


class ScalarSeries(BaseModel):
    steps: list[int]
    values: list[float]


class ScalarsRead(BaseModel):
    run_id: int
    records: int = Field(description="Scalar records returned (the last `limit` ones).")
    unreadable_lines: int = Field(0, description="Lines of the scalars file that are not a JSON object with `step`.")
    negative_steps: int = Field(0, description="Records left out for a `step` below 0 (training steps count from 0).")
    series: dict[str, ScalarSeries] = Field(description="loss, grad_norm, param_norm, lr, tokens_per_s, mem_gb.")
