"""From a policy dict and a model to the modules that must stay in high precision (shared by all backends).

Belongs here: reading the policy's `fp8_skip_layers` / `gemm_overrides` / `recipe` / `kept_bf16` /
`precision_ladder` (the per-layer rungs: `{"layers": {name: {"precision": ...}}}`), resolving
every name before anything changes (so an unmatched name leaves the model untouched), widening a
half-skipped fused LayerNormMLP to the whole module, and the parts of the report every backend shares.
Must not be here: backend calls (TE, torchao).

Per-GEMM overrides cannot be expressed by wrapping a module (TE autocast) or by swapping it (torchao): with
`gemm_overrides="whole_module"` (default, conservative) the module stays fully in high precision; with
`"ignore"` they are left to the TE debug API (`write_te_debug_config`) and listed as a warning.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fp8_policy.client.apply.names import NameIndex, UnmatchedLayers, fused_parts, resolve_names
from fp8_policy.client.apply.report import AlreadyBF16, ApplyReport, MatchedLayer

if TYPE_CHECKING:
    from torch import nn

GEMMS = ("fprop", "dgrad", "wgrad")
OVERRIDE_MODES = ("whole_module", "ignore")
RECIPE_CLASSES = {  # the policy's recipe names -> TE class names (transformer_engine.common.recipe)
    "delayed": "DelayedScaling",
    "current": "Float8CurrentScaling",
    "block": "Float8BlockScaling",
    "mxfp8": "MXFP8BlockScaling",
    "nvfp4": "NVFP4BlockScaling",
}
# The precision ladder's rungs, cheapest first (the service's policy/records.py PRECISIONS).
PRECISIONS = ("nvfp4", "mxfp8", "block", "current", "delayed", "bf16")


@dataclass(frozen=True, slots=True)
class PolicyView:
    """The parts of a policy dict (the service's recommendation JSON) that applying needs."""

    skip_layers: tuple[str, ...]
    gemm_overrides: dict[str, tuple[str, ...]]  # layer -> GEMMs, merged per layer, in GEMMS order
    recipe_name: str | None = None
    kept_bf16: tuple[str, ...] = ()  # layers that already ran in BF16 and stay there (kept like skips)
    layer_precisions: dict[str, str] = field(default_factory=dict)  # precision_ladder: layer -> rung

    @classmethod
    def from_dict(cls, policy: Mapping[str, Any]) -> PolicyView:
        """Validate and read `policy`; ValueError names the offending field."""
        if not isinstance(policy, Mapping):
            raise TypeError(f"policy must be a dict (the recommendation JSON), not {type(policy).__name__}")
        skips = _names(policy.get("fp8_skip_layers", []), "fp8_skip_layers")
        merged: dict[str, set[str]] = {}
        for i, item in enumerate(policy.get("gemm_overrides") or []):
            if not isinstance(item, Mapping) or not isinstance(item.get("layer"), str):
                raise ValueError(f"gemm_overrides[{i}] needs a string 'layer'")
            gemms = set(_names(item.get("gemms", []), f"gemm_overrides[{i}].gemms"))
            if not gemms or not gemms <= set(GEMMS):
                raise ValueError(f"gemm_overrides[{i}].gemms must be a non-empty subset of {list(GEMMS)}")
            merged.setdefault(item["layer"], set()).update(gemms)
        return cls(
            skip_layers=tuple(dict.fromkeys(skips)),
            gemm_overrides={k: tuple(g for g in GEMMS if g in v) for k, v in merged.items()},
            recipe_name=_recipe_name(policy.get("recipe")),
            kept_bf16=tuple(dict.fromkeys(_names(policy.get("kept_bf16", []), "kept_bf16"))),
            layer_precisions=_ladder(policy.get("precision_ladder")),
        )

    @property
    def override_only(self) -> dict[str, tuple[str, ...]]:
        """GEMM overrides of layers that are not skipped whole."""
        skipped = set(self.skip_layers)
        return {k: v for k, v in self.gemm_overrides.items() if k not in skipped}


def _recipe_name(recipe: object) -> str | None:
    """`name`, else the name of the `class` path (`...DelayedScaling` -> `delayed`), else None."""
    if not isinstance(recipe, Mapping):
        return None
    if recipe.get("name"):
        return str(recipe["name"])
    by_class = {cls: name for name, cls in RECIPE_CLASSES.items()}
    return by_class.get(str(recipe.get("class") or "").rsplit(".", 1)[-1])


def _ladder(value: object) -> dict[str, str]:
    """`precision_ladder.layers` -> {layer: rung}; entries may be `{"precision": ...}` or the rung itself."""
    if value is None:
        return {}
    layers = value.get("layers") if isinstance(value, Mapping) else None
    if not isinstance(layers, Mapping):
        raise ValueError("precision_ladder must be an object with a `layers` object (layer -> {precision})")
    out: dict[str, str] = {}
    for name, entry in layers.items():
        rung = entry.get("precision") if isinstance(entry, Mapping) else entry
        if not isinstance(name, str) or rung not in PRECISIONS:
            raise ValueError(f"precision_ladder.layers[{name!r}].precision must be one of {list(PRECISIONS)}")
        out[name] = str(rung)
    return out


def _names(value: object, field_name: str) -> list[str]:
    if not isinstance(value, Sequence) or isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{field_name} must be a list of strings")
    return list(value)


@dataclass(slots=True)
class Target:
    """One module to keep in high precision and the policy names that chose it."""

    module: nn.Module
    fqn: str
    chunk: int
    names: list[str] = field(default_factory=list)
    parts: set[str] = field(default_factory=set)


@dataclass(slots=True)
class Plan:
    """Targets to change plus the report filled so far."""

    view: PolicyView
    targets: list[Target]
    report: ApplyReport


def make_plan(
    model: nn.Module | Sequence[nn.Module],
    policy: Mapping[str, Any],
    *,
    backend: str,
    allow_unmatched: bool,
    gemm_overrides: str,
    quantizable: Callable[[nn.Module], bool],
) -> Plan:
    """Resolve the policy against `model`; raise UnmatchedLayers before any change unless allowed.

    `quantizable(module)` says whether the backend would run that module in FP8; a target with no
    quantizable module in its subtree is reported as already BF16 and dropped.
    """
    if gemm_overrides not in OVERRIDE_MODES:
        raise ValueError(f"gemm_overrides must be one of {OVERRIDE_MODES}, not {gemm_overrides!r}")
    view = PolicyView.from_dict(policy)
    report = ApplyReport(backend=backend, recipe=view.recipe_name)
    reasons = dict.fromkeys(view.skip_layers, "skip")
    # layers that ran in BF16 stay there: torchao converts every nn.Linear its filter lets through, and TE runs a
    # module in FP8 under the outer autocast unless it is wrapped, whatever the analysed run did with it
    reasons.update({name: "ran in BF16" for name in view.kept_bf16 if name not in reasons})
    if gemm_overrides == "whole_module":
        reasons.update(dict.fromkeys(view.override_only, "gemm override"))
    resolved, unmatched = resolve_names(NameIndex(model), reasons)
    if unmatched and not allow_unmatched:
        raise UnmatchedLayers(unmatched)
    report.unmatched = unmatched
    targets: dict[int, Target] = {}
    for name, (found, how) in resolved.items():
        if len({e.chunk for e in found}) < len(found):
            report.warnings.append(
                f"`{name}` names {len(found)} modules (nvdlfw_inspect gave them one name, e.g. "
                "TE TransformerLayers built without layer_number): all stay in high precision"
            )
        for entry in found:
            target = targets.setdefault(id(entry.module), Target(entry.module, entry.fqn, entry.chunk))
            target.names.append(name)
            if entry.part:
                target.parts.add(entry.part)
            report.matched.append(
                MatchedLayer(
                    name, entry.fqn, type(entry.module).__name__, "fused" if entry.part else how, reasons[name]
                )
            )
    kept = _drop_already_bf16(list(targets.values()), view, report, quantizable)
    report.warnings += _warnings(view, kept, gemm_overrides)
    return Plan(view, kept, report)


def _drop_already_bf16(
    targets: list[Target], view: PolicyView, report: ApplyReport, quantizable: Callable[[nn.Module], bool]
) -> list[Target]:
    kept = []
    for target in targets:
        if not any(quantizable(m) for m in target.module.modules()):
            why = f"{type(target.module).__name__} has no {report.backend} FP8 module: already high precision"
            report.already_bf16 += [AlreadyBF16(name, why) for name in target.names]
            continue
        report.already_bf16 += [
            AlreadyBF16(name, "ran in BF16 in the analysed run; kept in high precision")
            for name in target.names
            if name in view.kept_bf16
        ]
        kept.append(target)
    return kept


def _warnings(view: PolicyView, targets: list[Target], mode: str) -> list[str]:
    out = []
    if not view.skip_layers and not view.gemm_overrides and not view.kept_bf16:
        out.append("the policy skips nothing: every layer stays in FP8")
    for target in targets:
        full = fused_parts(target.module)
        if target.parts and target.parts != set(full):
            named = ", ".join(f"`{n}`" for n in target.names)
            out.append(
                f"{named} is one GEMM of a fused {type(target.module).__name__} "
                f"(`{target.fqn}`): TE cannot split it, so {'/'.join(full)} all run in BF16"
            )
    overrides = view.override_only
    if overrides and mode == "whole_module":
        out.append(
            "per-GEMM overrides applied to whole modules (all GEMMs in BF16): "
            + ", ".join(f"{k} [{'/'.join(v)}]" for k, v in overrides.items())
            + "; for exact per-GEMM control use write_te_debug_config (TE debug API)"
        )
    elif overrides:
        out.append(
            "per-GEMM overrides NOT applied (gemm_overrides='ignore'): "
            + ", ".join(f"{k} [{'/'.join(v)}]" for k, v in overrides.items())
            + "; apply them with write_te_debug_config (TE debug API)"
        )
    return out
