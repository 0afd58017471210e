"""Apply a recommended FP8 policy to a model: `apply_policy`, `recipe_from_policy`, `write_te_debug_config`.

Belongs here: the public entry points and the backend dispatch. Name resolution is in `names`/`plan`,
the backends in `te` (Transformer Engine autocast) and `torchao` (float8 training), the TE debug YAML in
`te_config`, the recipe object in `recipe`. torch, torchao and transformer_engine are imported lazily, so
`import client.apply` needs neither (and `write_te_debug_config` works without them).

    policy = client.recommendation(run_id)                   # the service's JSON
    recipe = recipe_from_policy(policy)
    report = apply_policy(model, policy, backend="te", recipe=recipe)  # before DDP/FSDP wrapping or after
    with te.autocast(enabled=True, recipe=recipe):           # skipped layers run in BF16 inside it
        loss = model(batch)

An unmatched name raises `UnmatchedLayers` (nothing is changed): a skip list that reaches nothing (a head
named `output` in the policy but `lm_head` in the model) silently leaves that layer in FP8.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from fp8_policy.client.apply.debug_session import DebugConfigConflict
from fp8_policy.client.apply.names import Unmatched, UnmatchedLayers
from fp8_policy.client.apply.pipeline import StagePolicy, StageUnknown, stage_policy
from fp8_policy.client.apply.recipe import recipe_from_policy
from fp8_policy.client.apply.report import AlreadyBF16, ApplyReport, MatchedLayer
from fp8_policy.client.apply.te_config import te_debug_config, write_te_debug_config

if TYPE_CHECKING:
    from torch import nn

BACKENDS = ("te", "torchao")

__all__ = [
    "BACKENDS",
    "AlreadyBF16",
    "ApplyReport",
    "DebugConfigConflict",
    "MatchedLayer",
    "StageUnknown",
    "Unmatched",
    "UnmatchedLayers",
    "apply_policy",
    "recipe_from_policy",
    "te_debug_config",
    "write_te_debug_config",
]


def apply_policy(
    model: nn.Module | Sequence[nn.Module],
    policy: Mapping[str, Any],
    backend: str = "te",
    *,
    allow_unmatched: bool = False,
    gemm_overrides: str = "whole_module",
    pp_rank: int | None = None,
    vp_stage: int | None = None,
    layer_offset: int | None = None,
    **backend_options: Any,
) -> ApplyReport:
    """Keep the policy's layers in high precision; returns what was matched, unmatched and already BF16.

    Names are the ones nvdlfw_inspect logged (root `model.`, DDP/FSDP `.module` levels optional either
    way, ModuleList children by `layer_number` when present, TE's `layernorm_mlp.fc1/.fc2`).

    backend="te": each skipped module's forward runs under `te.autocast(enabled=False)`
    (`te.fp8_autocast(enabled=False)` on TE < 2.9); idempotent. Layers of the policy's `precision_ladder` whose rung
    differs from the outer recipe run under their own `te.autocast(recipe=...)` (the policy's BF16 set wins; a
    `bf16` rung outside it is named in a warning, not applied); the report's `precision_wrapped` says which. Before any change an active nvdlfw_inspect debug session is checked:
    one watching a kept layer with LogFp8TensorStats raises `DebugConfigConflict` naming the layers (use the
    `te-monitor` config). Options: `recipe` (the outer autocast's recipe, needed under torch.compile),
    `context_factory`, `quantizable`, `layer_recipes`, `check_debug_session` (see `client.apply.te.apply_te`). Undo with `client.apply.te.restore_forwards(model)`. Apply it
    before `torch.compile` / CUDA-graph capture (they bake the forward in); DDP/FSDP wrapping may come
    before or after.
    backend="torchao": `convert_to_float8_training` in place, skipped layers stay `nn.Linear`. Options:
    `config` (a `Float8LinearConfig`), `module_filter_fn`. Apply it before FSDP/DDP and torch.compile.
    allow_unmatched: report unmatched names instead of raising `UnmatchedLayers`.
    gemm_overrides: "whole_module" (default) keeps a module with a per-GEMM override fully in high
    precision; "ignore" leaves overrides to the TE debug API (`write_te_debug_config`).
    Pipeline parallel (the policy's `parallel` section has pp > 1; its names are global): `model` is this process's
    stage (one module, or its list of virtual-pipeline chunks). Its blocks are mapped to global ones by their
    `layer_number` (Megatron sets the global one), `megatron.core.parallel_state`, or `pp_rank=` (with `vp_stage=`
    for one chunk) / `layer_offset=`; the policy's layers of other stages are listed in `report.other_stages`, not
    unmatched. Raises `StageUnknown` (nothing changed) when the stage cannot be told (client/apply/pipeline.py).
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    staged = stage_policy(model, policy, pp_rank=pp_rank, vp_stage=vp_stage, layer_offset=layer_offset)
    if staged is not None:
        policy = staged.policy
    try:
        report = _apply(model, policy, backend, allow_unmatched, gemm_overrides, backend_options)
    except UnmatchedLayers as exc:
        if staged is None:
            raise
        raise UnmatchedLayers([replace(u, name=staged.original.get(u.name, u.name)) for u in exc.unmatched]) from None
    return _with_stage(report, staged)


def _apply(
    model: nn.Module | Sequence[nn.Module],
    policy: Mapping[str, Any],
    backend: str,
    allow_unmatched: bool,
    gemm_overrides: str,
    backend_options: dict[str, Any],
) -> ApplyReport:
    if backend == "te":
        from fp8_policy.client.apply.te import apply_te

        return apply_te(
            model, policy, allow_unmatched=allow_unmatched, gemm_overrides=gemm_overrides, **backend_options
        )
    from fp8_policy.client.apply.torchao import apply_torchao

    return apply_torchao(
        model, policy, allow_unmatched=allow_unmatched, gemm_overrides=gemm_overrides, **backend_options
    )


def _with_stage(report: ApplyReport, staged: StagePolicy | None) -> ApplyReport:
    """The report in the policy's global names, with the stage and the layers other stages hold."""
    if staged is None:
        return report
    back = staged.original
    report.matched = [replace(m, name=back.get(m.name, m.name)) for m in report.matched]
    report.unmatched = [replace(u, name=back.get(u.name, u.name)) for u in report.unmatched]
    report.already_bf16 = [replace(a, name=back.get(a.name, a.name)) for a in report.already_bf16]
    report.stage, report.other_stages = staged.stage, list(staged.other_stages)
    return report
