"""A pipeline-parallel job's policy in the renderings: where each global block lives, per-stage files, and what no
rendering may claim.

Belongs here: `placement(decision)` (the job's pipeline layout when the decision's names are known to be global
blocks), `for_stage(decision, pp_stage)` (the decision one TE debug-API file of stage K takes: its names as that
stage logs them), `qualify(applied, decision)` (the caveat every format's `applied()` adds when the names are not
known to be global), the `parallel` section of the JSON recommendation (what `apply_policy` needs on one stage),
and the errors for a missing or impossible stage. Must not be here: the layout arithmetic (policy/parallel/),
Megatron's globs (megatron_pipeline.py), any dialect's emission.

Rules (names in a decision are global: the ingest renamed every rank's, policy/parallel/naming.py):
* `layer_number` naming (Megatron through TE's debug API: nvdlfw_inspect names a block by its global 1-based
  `layer_number`) and `global` naming: every stage logs the global names, so one TE debug YAML naming them hits the
  right module on every stage: exact, no stage needed.
* `local` naming (blocks named by their ModuleList index, from 0 on every stage): a stage's debug API names its
  blocks locally, so a file must name stage K's blocks by their local index: `for_stage` renames the global names of
  the blocks stage K holds (`stages.block_home`) and leaves the other stages' blocks out. Without a stage the TE
  formats refuse (`PipelineStageRequired`): one file would hit the same local index on every stage.
* `torchao` / `hydra` name modules by their position in the model: exact under pipeline parallelism only when the
  stages keep the global keys (`global` naming, e.g. torchtitan's ModuleDict of layers); otherwise the caveat points
  to `apply_policy(..., pp_rank=...)`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fp8_policy.policy.names import block_index_at, with_block_index
from fp8_policy.policy.parallel.caveat import layout_caveat
from fp8_policy.policy.parallel.info import ParallelInfo
from fp8_policy.policy.parallel.layout import ParallelLayout
from fp8_policy.policy.parallel.naming import GLOBAL, LAYER_NUMBER
from fp8_policy.policy.parallel.stages import StageError, block_home, check_stages, rank_chunks
from fp8_policy.policy.records import (
    GemmOverride,
    LayerGroup,
    LayerInfo,
    LayerPrecision,
    LayerStructure,
    PolicyDecision,
)
from fp8_policy.policy.render.applied import AppliedPolicy
from fp8_policy.policy.vocabulary import STAGED_FORMATS as STAGED_FORMATS  # re-exported


def stage_filename(filename: str, pp_stage: int | None) -> str:
    """`fp8_debug_config.yaml` -> `fp8_debug_config.pp3.yaml` for stage 3's file."""
    if pp_stage is None:
        return filename
    stem, dot, suffix = filename.rpartition(".")
    return f"{stem}.pp{pp_stage}.{suffix}" if dot else f"{filename}.pp{pp_stage}"


class PipelineStageRequired(ValueError):
    """A TE debug-API file of a job whose stages name their blocks locally: one file per stage."""

    def __init__(self, layout: ParallelLayout, fmt: str) -> None:
        self.stages = layout.pp
        super().__init__(
            f"the job ran {layout.describe()} and its logs name blocks by their index on each pipeline stage (from 0 "
            f"on every stage): one {fmt} file would hit the same local block on every stage. Ask for one stage: "
            f"format={fmt}&pp_stage=K with K from 0 to {layout.pp - 1} (fp8-policy recommend RUN --format {fmt} "
            "--pp-stage K), one file per stage"
        )


class InvalidPipelineStage(ValueError):
    """A stage the job does not have, or a stage asked of a format that has one file for every stage."""


@dataclass(frozen=True, slots=True)
class Placement:
    """The pipeline layout of a decision whose names are global blocks (`base` 1: names carry `layer_number`)."""

    layout: ParallelLayout
    naming: str
    base: int

    def home(self, logged_index: int) -> tuple[int, int, int]:
        """(pp_rank, vp_stage, ModuleList index on that chunk) of a block as the decision names it."""
        return block_home(self.layout, logged_index - self.base)


def placement(decision: PolicyDecision) -> Placement | None:
    """The job's pipeline layout when the decision's names are global and every block has one stage; None without
    pipeline parallelism or when the names cannot be placed (`qualify` says why)."""
    info = decision.parallel
    if info is None or not info.pipeline or info.naming is None or layout_caveat(info) is not None:
        return None
    assert info.layout is not None
    try:
        check_stages(info.layout)
    except StageError:
        return None
    return Placement(info.layout, info.naming, 1 if info.naming == LAYER_NUMBER else 0)


def check_stage(decision: PolicyDecision, pp_stage: int | None) -> None:
    """Raise InvalidPipelineStage for a stage the job does not have."""
    if pp_stage is None:
        return
    info = decision.parallel
    stages = info.layout.pp if info is not None and info.layout is not None else 1
    if not 0 <= pp_stage < stages:
        raise InvalidPipelineStage(
            f"pp_stage {pp_stage} is not a pipeline stage of this job: it has "
            + (f"stages 0 to {stages - 1} ({info.layout.describe()})" if stages > 1 and info and info.layout else "one")
        )


def for_stage(decision: PolicyDecision, pp_stage: int | None, fmt: str) -> tuple[PolicyDecision, list[str]]:
    """The decision one TE debug-API file takes (stage `pp_stage`'s, in its local names, when the job names blocks
    locally), and the header lines that say which stage and why."""
    check_stage(decision, pp_stage)
    where = placement(decision)
    if where is None:
        return decision, []
    if where.naming in (LAYER_NUMBER, GLOBAL):
        return decision, [
            f"# Pipeline parallel ({where.layout.describe()}): the logs name blocks globally (TE's debug API names "
            "Megatron's blocks by their global layer_number), so this one file is exact on every stage."
        ]
    if pp_stage is None:
        raise PipelineStageRequired(where.layout, fmt)
    blocks = rank_chunks(where.layout, pp_stage)[0]
    lines = [
        f"# Pipeline stage {pp_stage} of {where.layout.describe()}: global blocks {blocks.start}-{blocks.stop - 1}, "
        f"named by their index on this stage (0-{len(blocks) - 1}) as its debug API names them; every stage "
        "needs its own file (pp_stage=K).",
    ]
    return stage_decision(decision, where, pp_stage), lines


def stage_decision(decision: PolicyDecision, where: Placement, pp_stage: int) -> PolicyDecision:
    """`decision` restricted to stage `pp_stage`'s blocks (and every layer outside a block), named locally."""
    names: dict[str, str | None] = {}

    def local(name: str) -> str | None:
        if name not in names:
            found = block_index_at(name)
            if found is None:
                names[name] = name
            else:
                pp, _vp, index = where.home(found[1])
                names[name] = with_block_index(name, index) if pp == pp_stage else None
        return names[name]

    def info(layer: LayerInfo) -> LayerInfo | None:
        name = local(layer.name)
        if name is None or name == layer.name:
            return layer if name is not None else None
        structure = layer.structure
        index = block_index_at(name)
        return replace(
            layer, name=name, structure=LayerStructure(structure.group, index[1] if index else None, structure.sublayer)
        )

    layers = tuple(found for layer in decision.layers if (found := info(layer)) is not None)
    overrides = tuple(
        GemmOverride(name, o.gemms, o.reason) for o in decision.gemm_overrides if (name := local(o.layer)) is not None
    )
    rungs = tuple(
        LayerPrecision(name, lp.precision, lp.evidence, lp.confidence)
        for lp in decision.layer_precisions
        if (name := local(lp.layer)) is not None
    )
    skips = tuple(name for layer in decision.skip_layers if (name := local(layer)) is not None)
    return replace(decision, skip_layers=skips, gemm_overrides=overrides, layer_precisions=rungs, layers=layers)


def qualify(applied: AppliedPolicy, decision: PolicyDecision, extra: str | None = None) -> AppliedPolicy:
    """`applied` with the run's layout caveat (and `extra`) in its approximation: never exact on names that are not
    known to be global blocks."""
    parts = [part.rstrip(".") for part in (applied.approximation, extra, layout_caveat(decision.parallel)) if part]
    if not parts:
        return applied
    return replace(applied, approximation="; ".join(parts) + ".")


def by_position(decision: PolicyDecision, fmt: str) -> str | None:
    """The caveat of a format that names modules by their position in the model (torchao, hydra) under pipeline
    parallelism: exact only when the stages keep the global keys (module docstring)."""
    where = placement(decision)
    if where is None or where.naming == GLOBAL:
        return None
    if not any(layer.structure.group is LayerGroup.BODY for layer in decision.layers):
        return None
    return (
        f"pipeline parallel ({where.layout.describe()}): the {fmt} output names blocks by their global position, "
        "but each stage's modules are numbered from 0 (Megatron's ModuleList), so on stages past the first it "
        "names other blocks; on one stage use apply_policy(model, policy, pp_rank=K), which maps the stage's "
        "modules to global names"
    )


def by_debug_name(decision: PolicyDecision, fmt: str) -> str | None:
    """The caveat of a format that names modules as TE's debug API does (`te-recipe`: a QuantizerRole's name is the
    name nvdlfw_inspect assigned): exact on every stage when those names are global (`layer_number`, `global`);
    under local names every stage's blocks carry the same names, and one file cannot tell them apart."""
    where = placement(decision)
    if where is None or where.naming in (LAYER_NUMBER, GLOBAL):
        return None
    return (
        f"pipeline parallel ({where.layout.describe()}) with blocks named locally: each stage's modules carry the "
        f"same names, so one {fmt} file would give local block K of every stage block K's precision; on one stage "
        "use apply_policy(model, policy, pp_rank=K)"
    )


def policy_json(info: ParallelInfo | None) -> dict[str, Any] | None:
    """The recommendation's `parallel` section: what `apply_policy` needs to map one stage's modules to the
    policy's global names (the client reads it without the layout rules: `stages` lists each pipeline rank's
    chunks as [first, stop) global 0-based blocks; `block_base` 1 when the policy's block numbers are
    `layer_number`s)."""
    if info is None:
        return None
    layout = info.layout
    out: dict[str, Any] = {
        "source": info.source,
        "naming": info.naming,
        "exact": info.exact and layout_caveat(info) is None,
        "caveat": layout_caveat(info),
        "block_base": 1 if info.naming == LAYER_NUMBER else 0,
        "tp": 1,
        "pp": 1,
        "vpp": None,
        "dp": 1,
        "ep": 1,
        "cp": 1,
        "num_layers": None,
        "describe": None,
        "stages": None,
    }
    if layout is None:
        return out
    out |= {"tp": layout.tp, "pp": layout.pp, "vpp": layout.vpp, "dp": layout.dp, "ep": layout.ep, "cp": layout.cp}
    out |= {"num_layers": layout.num_layers, "describe": layout.describe()}
    try:
        check_stages(layout)
        out["stages"] = [[[c.start, c.stop] for c in rank_chunks(layout, p)] for p in range(layout.pp)]
    except StageError:
        out["stages"] = None
    return out
