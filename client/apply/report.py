"""What applying a policy did: `ApplyReport` and its entries.

Belongs here: the report record, its JSON shape and its printable summary. Must not be here: name
resolution or anything that changes the model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from fp8_policy.client.apply.names import Unmatched


@dataclass(frozen=True, slots=True)
class MatchedLayer:
    """A policy name and the module it reached.

    fqn: the module's `named_modules()` path (the fused module for `layernorm_mlp.fc1`);
    how: `exact`, `wrapper levels` (DDP/FSDP `.module` levels differ between logs and model) or
    `fused` (a GEMM of TE's LayerNormMLP: the whole fused module is affected);
    reason: `skip` (fp8_skip_layers), `ran in BF16` (kept_bf16) or `gemm override` (applied to the whole module).
    """

    name: str
    fqn: str
    module_type: str
    how: str
    reason: str = "skip"


@dataclass(frozen=True, slots=True)
class AlreadyBF16:
    """A matched layer that needs no change, and why."""

    name: str
    why: str


@dataclass(slots=True)
class ApplyReport:
    """Result of `apply_policy`.

    matched / unmatched / already_bf16: per policy name. wrapped (te): FQNs whose forward now runs under
    autocast(enabled=False) (skips, GEMM overrides and the ladder's BF16 rungs). precision_wrapped: FQN -> the
    ladder rung it now runs at (te: its own `te.autocast(recipe=...)` nested in the outer one; torchao: MXFP8
    rungs converted with torchao's prototype MXFP8 training). converted / kept / not_convertible (torchao):
    nn.Linear FQNs swapped to Float8Linear, kept in high precision by the policy, and left alone because a dim is
    not a multiple of 16. stage / other_stages (pipeline parallel, client/apply/pipeline.py): the stage this
    process holds and the policy's layers left to the other stages (names are the policy's global ones).
    """

    backend: str
    recipe: str | None = None
    matched: list[MatchedLayer] = field(default_factory=list)
    unmatched: list[Unmatched] = field(default_factory=list)
    already_bf16: list[AlreadyBF16] = field(default_factory=list)
    wrapped: list[str] = field(default_factory=list)
    precision_wrapped: dict[str, str] = field(default_factory=dict)
    converted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    not_convertible: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    stage: str | None = None  # pipeline parallel: which stage this process holds and how it was told
    other_stages: list[str] = field(default_factory=list)  # the policy's layers held by other pipeline stages

    @property
    def ok(self) -> bool:
        """Every policy name reached a module."""
        return not self.unmatched

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (suggestions as lists)."""
        out = asdict(self)
        out["unmatched"] = [{"name": u.name, "suggestions": list(u.suggestions)} for u in self.unmatched]
        return out

    def summary(self) -> str:
        """Human-readable, one fact per line."""
        lines = [f"backend: {self.backend}" + (f" (policy recipe: {self.recipe})" if self.recipe else "")]
        if self.stage is not None:
            lines.append(f"pipeline stage: {self.stage}; {len(self.other_stages)} policy layer(s) on other stages")
        lines += [
            f"matched   {m.name} -> {m.fqn or '<root>'} ({m.module_type}, {m.how}, {m.reason})" for m in self.matched
        ]
        lines += [f"UNMATCHED {u.message()}" for u in self.unmatched]
        lines += [f"bf16      {a.name}: {a.why}" for a in self.already_bf16]
        if self.backend == "te":
            lines.append(f"wrapped in autocast(enabled=False): {', '.join(self.wrapped) or 'none'}")
        else:
            lines.append(f"converted to Float8Linear: {len(self.converted)}: {', '.join(self.converted)}")
            lines.append(f"kept in high precision: {', '.join(self.kept) or 'none'}")
            if self.not_convertible:
                lines.append(f"not converted (dims not multiples of 16): {', '.join(self.not_convertible)}")
        lines += [f"own recipe {rung:<7} {fqn}" for fqn, rung in self.precision_wrapped.items()]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)
