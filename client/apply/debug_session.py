"""Checking an active nvdlfw_inspect debug session against what `apply_policy(backend="te")` is about to do.

Belongs here: reading the active session's config (nvdlfw_inspect's `ConfigManager`, the same lookup TE does per
layer), the names TE will look a module up by, and the one error naming every conflicting layer and the fix.
Must not be here: wrapping modules (see `te`), name resolution (see `names`).

Why (TE 2.20, transformer_engine/debug/features/log_fp8_tensor_stats.py `inspect_tensor`): LogFp8TensorStats
asserts `rowwise_quantized_tensor is columnwise_quantized_tensor` before its own "layer runs in high precision"
skip, so a layer kept outside FP8 and watched by LogFp8TensorStats stops the run (seen on an H100 with TE 2.20.2);
and a bare LogFp8TensorStats stat (no recipe prefix) on a layer that runs NVFP4 raises "Cannot compute NVFP4 stats"
(`check_if_stat_is_supported`). The session is active when `nvdlfw_inspect.api.DEBUG_MANAGER` is set
(nvdlfw_inspect/api.py `initialize`); TE looks layers up by `ConfigManager.get_config_for_layer(name)` with the
module's debug name (`module.name`, set by `infer_and_assign_layer_names` or TE's `name=`; a LayerNormMLP asks for
`<name>.fc1` / `<name>.fc2`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fp8_policy.client.apply.names import fused_parts

if TYPE_CHECKING:
    from torch import nn

# LogFp8TensorStats' recipe prefixes (log_fp8_tensor_stats.py ALL_RECIPE_NAMES): a stat without one is "bare".
FP8_STAT_RECIPES = ("fp8_delayed_scaling", "fp8_current_scaling", "mxfp8", "fp8_block_scaling")
FIX = (
    "Fix: watch the layers kept in high precision with LogTensorStats only, e.g. with the te-monitor config "
    "(`fp8-policy recommend RUN --format te-monitor -o te_monitor.yaml`, or PolicyClient.monitor_config(run_id, path)) "
    "passed to debug_api.initialize(config_file=...); or apply_policy(..., check_debug_session=False) to skip this check."
)


class DebugConfigConflict(RuntimeError):
    """The active debug session would stop TE on layers this policy changes (nothing was changed)."""

    def __init__(self, conflicts: Mapping[str, str]) -> None:
        self.conflicts = dict(conflicts)
        lines = [
            f"the active nvdlfw_inspect debug session would stop Transformer Engine on {len(self.conflicts)} "
            "layer(s) of this policy (nothing was changed):"
        ]
        lines += [f"  {name}: {why}" for name, why in self.conflicts.items()]
        lines.append(FIX)
        super().__init__("\n".join(lines))


def session_lookup() -> Callable[[str], Mapping[str, Any]] | None:
    """The active session's per-layer config lookup, or None without nvdlfw_inspect or without a session."""
    try:
        import nvdlfw_inspect.api as debug_api
        from nvdlfw_inspect.config_manager import ConfigManager
    except ImportError:
        return None
    if getattr(debug_api, "DEBUG_MANAGER", None) is None:
        return None
    return ConfigManager.get_config_for_layer  # type: ignore[no-any-return]


def debug_names(
    module: nn.Module, logged: Mapping[int, list[str]], quantizable: Callable[[nn.Module], bool]
) -> list[str]:
    """Every name TE may look `module` and the modules under it up by: their own `name` (TE's `name=` or
    `infer_and_assign_layer_names`) and the names nvdlfw_inspect would log for them (`logged`: id(module) -> names,
    fused `.fc1` / `.fc2` aliases included). Only modules TE quantizes ask for a debug config."""
    names: list[str] = []
    for sub in module.modules():
        if not quantizable(sub):
            continue
        names += logged.get(id(sub), [])
        own = getattr(sub, "name", None)
        if isinstance(own, str) and own:
            names.append(own)
            names += [f"{own}.{part}" for part in fused_parts(sub)]
    return list(dict.fromkeys(names))


def _fp8_stats_feature(config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    feature = (config.get("transformer_engine") or {}).get("LogFp8TensorStats")
    if not isinstance(feature, Mapping) or not feature.get("enabled", False):
        return None
    return feature


def _bare_stats(feature: Mapping[str, Any]) -> list[str]:
    structs = feature.get("tensors_struct") or [feature]
    stats = [s for struct in structs for s in (struct.get("stats") or [])]
    return [s for s in stats if not any(recipe in str(s) for recipe in FP8_STAT_RECIPES)]


def find_conflicts(
    lookup: Callable[[str], Mapping[str, Any]],
    kept: list[tuple[str, list[str]]],
    nvfp4: list[tuple[str, list[str]]],
) -> dict[str, str]:
    """{debug name: why} for kept modules watched by LogFp8TensorStats and NVFP4 modules given its bare stats.

    kept / nvfp4: (module FQN, the names TE may look it up by)."""
    out: dict[str, str] = {}
    for fqn, names in kept:
        for name in names:
            try:
                feature = _fp8_stats_feature(lookup(name))
            except ValueError:  # nvdlfw's own config errors are for TE to report
                continue
            if feature is not None:
                module = fqn or "<root>"
                out[name] = f"kept in high precision by the policy (module `{module}`) but watched by LogFp8TensorStats"
    for fqn, names in nvfp4:
        for name in names:
            try:
                feature = _fp8_stats_feature(lookup(name))
            except ValueError:
                continue
            bare = _bare_stats(feature) if feature is not None else []
            if bare:
                out.setdefault(
                    name,
                    f"runs NVFP4 under the policy (module `{fqn}`) but LogFp8TensorStats has bare stats {bare}: "
                    "use LogNvfp4TensorStats",
                )
    return out
