"""`write_parallel_job`: the per-rank logs of a TP / PP / VPP / DP / EP / CP job, as Megatron + TE write them.

Belongs here: `ParallelJob` (a whole-model `SyntheticRun` plus the job's layout, how its blocks are numbered in
the logs, which reduction group the statistics use, faulty replicas) and `write_parallel_job`, which writes every
rank's metadata and statistics logs with the rank's own layers under the names that rank logs. Deterministic.
Must not be here: the layout arithmetic (policy/parallel), parsing, web or database imports.

What each rank logs (policy/parallel/naming.py and replicas.py cite the sources):
* the blocks of its pipeline stage (every virtual stage it holds), numbered `layer_number` (global, 1-based:
  nvdlfw_inspect on Megatron), `global` (0-based) or `local` (the ModuleList index, from 0 on every stage);
* with expert parallelism, only its own experts, as `gemm_<local i>`;
* activation and gradient values reduced over the reduction group: "tp-dp" (Megatron and Megatron-Bridge reduce
  over the tensor-and-data-parallel group): identical on every rank of a stage; "dp": identical on data-parallel
  replicas, each tensor-parallel shard its own; "none": every rank its own. Weights are per tensor-parallel shard
  (unreduced), identical on replicas. A `faulty` rank scales its activation and gradient values (a replica that
  left its group);
* the output layer on the last stage only, when `with_head`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fp8_policy.policy.parallel.layout import ParallelLayout
from fp8_policy.policy.parallel.naming import GLOBAL, LAYER_NUMBER, LOCAL, NAMINGS
from fp8_policy.policy.parallel.ranks import RankCoord, rank_coord
from fp8_policy.policy.parallel.stages import rank_chunks
from fp8_policy.policy.parse.metadata_log import PARALLEL_RECORD
from fp8_policy.policy.synthetic.families import FAMILIES, LayerSpec
from fp8_policy.policy.synthetic.run import SyntheticRun, stats_matrix
from fp8_policy.policy.synthetic.writer import (
    DEFAULT_START,
    PLAN_ORDER,
    RankFiles,
    _Clock,
    _rank_paths,
    _write_metadata,
    _write_stats,
)

REDUCTIONS = ("tp-dp", "dp", "none")


@dataclass(frozen=True)
class ParallelJob:
    """`run` describes the whole model with global 0-based blocks (`first_index=0`); `run.ranks` is ignored."""

    run: SyntheticRun
    layout: ParallelLayout
    naming: str = LAYER_NUMBER
    reduction: str = "tp-dp"
    faulty: Mapping[int, float] = field(default_factory=dict)  # rank -> factor on its activation/gradient values
    record_layout: bool = False  # each rank writes its fp8_policy parallel record in its metadata log
    with_head: bool = False  # Megatron's output_layer is not a TE module unless asked (not logged)

    def __post_init__(self) -> None:
        if self.run.first_index != 0:
            raise ValueError("describe the whole model with first_index=0 (global 0-based blocks)")
        if self.naming not in NAMINGS or self.reduction not in REDUCTIONS:
            raise ValueError(f"naming must be one of {NAMINGS}, reduction one of {REDUCTIONS}")
        if self.layout.num_layers not in (None, self.run.num_layers):
            raise ValueError("layout.num_layers must equal run.num_layers")

    def experts_per_rank(self) -> int | None:
        family = FAMILIES[self.run.family]
        experts = {int(s.rsplit("_", 1)[1]) for _r, s in family.gemms if ".gemm_" in s}
        if not experts:
            return None
        if len(experts) % self.layout.ep:
            raise ValueError(f"{len(experts)} experts do not divide over expert_model_parallel_size {self.layout.ep}")
        return len(experts) // self.layout.ep


@dataclass(frozen=True)
class WrittenJob:
    root: Path
    files: tuple[RankFiles, ...]
    logged_to_global: dict[int, dict[str, str]]  # rank -> its logged layer name -> the whole model's name


def write_parallel_job(job: ParallelJob, dest: Path, *, step_ms: int = 400) -> WrittenJob:
    dest = Path(dest)
    layout, run = job.layout, job.run
    clock, iterations = _Clock(DEFAULT_START), run.iteration_array()
    cycle = run.metric_cycle()
    matrices: dict[int, np.ndarray] = {}

    def values_of(value_rank: int) -> np.ndarray:
        if value_rank not in matrices:
            matrices[value_rank] = stats_matrix(run, value_rank)[1]
        return matrices[value_rank]

    files, mapping = [], {}
    specs = {s.name: s for s in run.layers()}
    for rank in range(layout.world_size):
        coord = rank_coord(layout, rank)
        names = _rank_layers(job, coord, specs)
        mapping[rank] = {logged: whole for whole, logged in names.items()}
        rows = [k for k, (layer, _t, _s) in enumerate(cycle) if layer in names]
        values = np.empty((len(rows), len(iterations)))
        for out, k in enumerate(rows):
            layer, tensor, _stat = cycle[k]
            values[out] = values_of(_value_rank(job, coord, tensor, ".gemm_" in layer))[k]
            if tensor != "weight" and rank in job.faulty:
                values[out] = np.clip(values[out] * job.faulty[rank], 0.0, 100.0)
        line_names = [f"{names[cycle[k][0]]}_{cycle[k][1]}_{cycle[k][2]}" for k in rows]
        meta_path, stats_path = _rank_paths(dest, rank, True)
        messages = _metadata(job, coord, names, specs)
        meta_lines = _write_metadata(meta_path, messages, clock, 3 * rank)
        lines = _write_stats(stats_path, line_names, iterations, values, clock, 4000 + 3 * rank, step_ms)
        files.append(RankFiles(rank, meta_path, stats_path, meta_lines, lines, stats_path.stat().st_size))
    return WrittenJob(dest, tuple(files), mapping)


def _rank_layers(job: ParallelJob, coord: RankCoord, specs: Mapping[str, LayerSpec]) -> dict[str, str]:
    """The whole model's layer -> the name this rank logs it under, for the layers this rank holds."""
    layout = job.layout
    chunks = rank_chunks(layout, coord.pp) if layout.pp > 1 or layout.stage_counts else [range(job.run.num_layers)]
    position = {block: (i, chunk_no) for chunk_no, chunk in enumerate(chunks) for i, block in enumerate(chunk)}
    per_rank = job.experts_per_rank()
    out: dict[str, str] = {}
    for name, spec in specs.items():
        if spec.ordinal is None:
            last_stage = coord.pp == layout.pp - 1
            if job.with_head and last_stage:
                out[name] = name
            continue
        if spec.ordinal not in position or name in job.run.bf16_layers:
            continue
        logged = name
        if ".gemm_" in name and per_rank is not None:
            expert = int(name.rsplit("_", 1)[1])
            if expert // per_rank != coord.ep:
                continue
            logged = f"{name.rsplit('_', 1)[0]}_{expert - coord.ep * per_rank}"
        index = {LAYER_NUMBER: spec.ordinal + 1, GLOBAL: spec.ordinal, LOCAL: position[spec.ordinal][0]}[job.naming]
        prefix = f"{FAMILIES[job.run.family].blocks}.{spec.ordinal}."
        out[name] = f"{FAMILIES[job.run.family].blocks}.{index}." + logged[len(prefix) :]
    return out


def _value_rank(job: ParallelJob, coord: RankCoord, tensor: str, expert: bool) -> int:
    shard = coord.etp if expert else coord.tp
    if tensor == "weight":
        return shard
    if job.reduction == "tp-dp":
        return 0
    return shard if job.reduction == "dp" else coord.rank


def _metadata(
    job: ParallelJob, coord: RankCoord, names: Mapping[str, str], specs: Mapping[str, LayerSpec]
) -> list[tuple[int, str]]:
    out = [
        (0, f"Default logging to file enabled at ./logs/parallel/rank_{coord.rank}"),
        (694, "Reading config from ./fp8_stats.yaml."),
        (694, "Loaded configs for ['fp8_stats_collection']."),
    ]
    if job.record_layout:
        out.append((700, PARALLEL_RECORD + json.dumps(_record(job.layout, coord), sort_keys=True)))
    blocks = sorted({n.rsplit(".", 1)[0].split(".layers.")[1].split(".")[0] for n in names.values() if ".layers." in n})
    family = FAMILIES[job.run.family]
    out += [(853, f"Assigned layer name: {family.blocks}.{b}") for b in blocks]
    t = 3500
    for whole, logged in names.items():
        if specs[whole].ordinal is None and not job.with_head:
            continue
        out += [
            (t, f"LAYER={logged}: Tensor: {tensor}, gemm {gemm} - {job.run.te_plan_word}")
            for tensor, gemm in PLAN_ORDER
        ]
        t += 40
    return out


def _record(layout: ParallelLayout, coord: RankCoord) -> dict[str, object]:
    return {
        "rank": coord.rank,
        "world_size": layout.world_size,
        "tensor_model_parallel_size": layout.tp,
        "pipeline_model_parallel_size": layout.pp,
        "virtual_pipeline_model_parallel_size": layout.vpp,
        "context_parallel_size": layout.cp,
        "expert_model_parallel_size": layout.ep,
        "order": layout.order,
        "num_layers": layout.num_layers,
        "tp_rank": coord.tp,
        "pp_rank": coord.pp,
        "dp_rank": coord.dp,
        "cp_rank": coord.cp,
        "ep_rank": coord.ep,
    }
