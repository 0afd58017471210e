"""API shapes of the rendered configs kept with a run (service/configs/)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fp8_policy.service.schema_base import ApiModel

MAX_KEEP_FORMATS = 16


class KeepConfigs(BaseModel):
    """What to keep: formats rendered from the run's recommendation with these options."""

    model_config = ConfigDict(extra="forbid")

    formats: list[str] = Field(
        min_length=1,
        max_length=MAX_KEEP_FORMATS,
        description="json, or any rendered format of GET .../recommendation?format= (te-yaml, megatron, hydra, ...)",
    )
    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="The recommendation's options, as the body of POST .../recommendation (empty: the default).",
    )


class RunConfigRead(ApiModel):
    id: int
    run_id: int
    format: str
    version: int = Field(description="1, 2, ... per run and format: a newer rendering is a new version.")
    filename: str
    media_type: str
    sha256: str = Field(description="Of the file's bytes (UTF-8).")
    size: int = Field(description="Bytes.")
    policy_version: str = Field(description="The policy version of the recommendation the file was rendered from.")
    options: dict[str, Any] = Field(description="That recommendation's options (overrides, pp_stage).")
    recommendation_sha256: str = Field(description="sha256 of that recommendation's JSON answer: which one it was.")
    created_at: datetime
    created_by: str | None = Field(description="Name of the token that kept it; null when the service was open.")
    download: str = Field(description="Path of the file itself (GET).")
    new: bool | None = Field(None, description="POST only: false when the newest version already was this file.")


class RunConfigList(ApiModel):
    items: list[RunConfigRead]
