"""What one dialect really keeps in BF16 for a decision, compared with what the decision asked for.

Belongs here: the `AppliedPolicy` record, the comparison with the request (the recommendation's BF16 set:
`skip_layers` and the layers that ran in BF16 (`kept_bf16`) whole, `gemm_overrides` per GEMM) and the one-line statement every rendered file starts with.
Each dialect module builds its own `AppliedPolicy` in `applied(decision)`; the recommendation's JSON carries
them per format, and `bench/eval_bf16.py` checks them against the parsed artifacts.

Rule (issue 12): a format applies AT LEAST the requested BF16 set. What it cannot express exactly is
approximated on the safe side (a GEMM override becomes the whole module in BF16, a Hydra block with any
skipped or overridden layer leaves `fp8_layers`); what it cannot express at all is listed in
`not_applied` and said in the statement line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fp8_policy.policy.records import GEMMS, PolicyDecision
from fp8_policy.policy.render.layout import merged_overrides
from fp8_policy.policy.render.precision import whole_bf16_layers

MAX_NAMED = 4


@dataclass(frozen=True, slots=True)
class AppliedPolicy:
    """The BF16 set one format applies. `bf16_layers` run wholly in BF16; `bf16_gemms` keep only those GEMMs in
    BF16 (layers not in `bf16_layers`); `not_applied` are requested layers the format cannot keep in BF16."""

    format: str
    bf16_layers: tuple[str, ...]
    bf16_gemms: dict[str, tuple[str, ...]] = field(default_factory=dict)
    not_applied: tuple[str, ...] = ()
    approximation: str | None = None  # one line; None when the format applies the request exactly

    @property
    def exact(self) -> bool:
        return self.approximation is None

    def statement(self) -> str:
        """The one line at the top of the rendered file."""
        if self.approximation is None:
            return "Applies the recommendation exactly (same BF16 layers and GEMMs as the JSON recommendation)."
        return f"Approximation: {self.approximation}"

    def to_dict(self, decision: PolicyDecision) -> dict[str, Any]:
        requested = set(whole_bf16_layers(decision)) | set(merged_overrides(decision))
        order = {layer.name: i for i, layer in enumerate(decision.layers)}
        extra = sorted(set(self.bf16_layers) - requested, key=lambda n: order.get(n, len(order)))
        promoted = [n for n in merged_overrides(decision) if n in self.bf16_layers]
        return {
            "bf16_layers": list(self.bf16_layers),
            "bf16_gemms": [{"layer": n, "gemms": list(g)} for n, g in self.bf16_gemms.items()],
            "overrides_as_whole_layers": promoted,
            "extra_bf16_layers": extra,
            "not_applied": list(self.not_applied),
            "exact": self.exact,
            "approximation": self.approximation,
        }


def missing(applied: AppliedPolicy, decision: PolicyDecision) -> list[str]:
    """Requested BF16 (layers and GEMMs) the format does not apply, excluding what it states in `not_applied`:
    empty when the format applies at least the request."""
    whole = set(applied.bf16_layers)
    stated = set(applied.not_applied)
    out = [
        f"{name}: {'skipped' if name in decision.skip_layers else 'ran in BF16'} but not in BF16"
        for name in whole_bf16_layers(decision)
        if name not in whole and name not in stated
    ]
    for name, gemms in merged_overrides(decision).items():
        if name in whole or name in stated:
            continue
        kept = set(applied.bf16_gemms.get(name, ()))
        lost = [g for g in gemms if g not in kept]
        if lost:
            out.append(f"{name}: {'/'.join(lost)} requested in BF16 but left in FP8")
    return out


def names(items: list[str] | tuple[str, ...]) -> str:
    shown = ", ".join(items[:MAX_NAMED])
    return shown + (f" and {len(items) - MAX_NAMED} more" if len(items) > MAX_NAMED else "")


def whole_module_overrides(decision: PolicyDecision, fmt: str, why: str) -> AppliedPolicy:
    """The torchao / Megatron rule: skips and layers that ran in BF16 exact, every GEMM override promoted to its
    whole module in BF16."""
    overrides = merged_overrides(decision)
    layers = tuple(dict.fromkeys((*whole_bf16_layers(decision), *overrides)))
    approximation = None
    if overrides:
        gemms = sorted({g for gs in overrides.values() for g in gs}, key=GEMMS.index)
        approximation = (
            f"{len(overrides)} layer(s) with GEMM overrides ({'/'.join(gemms)}) run wholly in BF16 "
            f"({why}): {names(list(overrides))}; the te-yaml policy keeps only those GEMMs in BF16."
        )
    return AppliedPolicy(fmt, layers, {}, (), approximation)
