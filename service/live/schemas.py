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


class EventsPageRead(BaseModel):
    run_id: int
    total: int = Field(description="Every event the run raised while it was live.")
    events: list[LiveEventRead] = Field(description="This page, newest first (ids descending).")
    next_before: int | None = Field(description="Pass as `before` for the next, older page; null: no older event.")
