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
from typing import TYPE_CHECKING, Any

from fp8_policy.client.apply.debug_session import DebugConfigConflict
from fp8_policy.client.apply.names import Unmatched, UnmatchedLayers
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
    """
    if backend == "te":
        from fp8_policy.client.apply.te import apply_te

        return apply_te(
            model, policy, allow_unmatched=allow_unmatched, gemm_overrides=gemm_overrides, **backend_options
        )
    if backend == "torchao":
        from fp8_policy.client.apply.torchao import apply_torchao

        return apply_torchao(
            model, policy, allow_unmatched=allow_unmatched, gemm_overrides=gemm_overrides, **backend_options
        )
    raise ValueError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
