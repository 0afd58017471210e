"""Response models of a parallel job's layout: the analysis' `parallel` object and the recommendation's `parallel`.

They mirror `policy.parallel.info.ParallelInfo.to_json()` and `policy.render.pipeline.policy_json()` field by field
(service/analysis/schemas.py says why every key must be declared here).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fp8_policy.service.schema_base import ApiModel

Source = Literal["metadata", "inferred", "unknown"]
Naming = Literal["layer_number", "global", "local"]


class ReplicaMismatchRead(ApiModel):
    """Ranks of one data-parallel group whose statistics differ from what the rest of the group agrees on."""

    group: list[int]
    agreeing: list[int]
    differing: list[int]
    what: str = Field(
        description="What was compared: 'dense layers', 'experts', or the activation and gradient statistics of the "
        "dense layers (over a stage's tensor- and data-parallel group)."
    )


class ParallelRead(ApiModel):
    """The job's parallel layout, where it came from, and how the logs named its blocks (layer names are global)."""

    tp: int
    pp: int
    vpp: int | None
    dp: int
    ep: int
    cp: int
    order: str | None = Field(description="Megatron's rank order, tensor-parallel rank fastest (tp-cp-ep-dp-pp).")
    source: Source = Field(description="metadata (stated or recorded by the ranks), inferred from the logs, unknown.")
    naming: Naming | None = Field(
        description="How the logs numbered blocks: layer_number (global, 1-based), global (0-based), local (from 0 "
        "on every stage, renamed to global here); null: as logged."
    )
    exact: bool = Field(description="Layer names are global blocks for certain.")
    etp: int | None = None
    num_layers: int | None = None
    num_moe_experts: int | None = None
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    stage_counts: list[list[int]] | None = None
    embedding_in_split: bool | None = None
    loss_in_split: bool | None = None
    world_size: int | None = None
    describe: str | None = Field(None, description="e.g. 'TP2 x PP4 x DP2'.")
    ranks: dict[str, dict[str, int]] = Field(
        description="Rank -> its coordinates (tp, pp, dp, ep, cp; only those that could be told: an inferred stage "
        "gives pp alone)."
    )
    replicas: dict[str, int] = Field(description="Rank -> the rank whose statistics it repeats (stored once).")
    mismatches: list[ReplicaMismatchRead]
    unreduced: bool
    missing_ranks: list[int]
    outside_ranks: list[int] = Field(
        default_factory=list, description="Ranks past the stated world size: the layout was taken from the logs."
    )
    notes: list[str]


class PipelineRead(ApiModel):
    """What `apply_policy` needs to map one pipeline stage's modules to the policy's global layer names."""

    source: Source
    naming: Naming | None
    exact: bool = Field(description="The names are global blocks for certain (no caveat).")
    caveat: str | None = Field(description="Why the names may not be global blocks; null when they are.")
    block_base: Literal[0, 1] = Field(description="1: block numbers in the names are layer_numbers (1-based).")
    tp: int
    pp: int
    vpp: int | None
    dp: int
    ep: int
    cp: int
    num_layers: int | None
    describe: str | None
    stages: list[list[list[int]]] | None = Field(
        description="Per pipeline rank, per model chunk: [first, stop) global 0-based blocks."
    )
