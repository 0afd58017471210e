"""Logged layer name -> module resolution: the names nvdlfw_inspect would give every module of a model.

Belongs here: the walk that mirrors `nvdlfw_inspect.api.infer_and_assign_layer_names` (0.2.2, quoted in
fp8-log-format.md §1.4), wrapper-level normalisation (DDP / Megatron `.module`, FSDP1, activation
checkpointing, torch.compile), TE's fused `layernorm_mlp.fc1/.fc2` aliases, and close-match suggestions
for names that match nothing. Must not be here: anything that changes the model.

Naming rules mirrored:
* the root is `model`; children follow attribute paths (`named_children`);
* a ModuleList gets no name itself; its children are named `getattr(child, "layer_number", index)`
  (TE / Megatron TransformerLayer.layer_number is 1-based, plain lists are 0-based);
* a list of model chunks (Megatron virtual pipeline) names every chunk from the same `model` root;
* TE's LayerNormMLP logs its two GEMMs as `<name>.fc1` / `<name>.fc2` (TE `module/layernorm_mlp.py`,
  `_get_debug_quantizers`: `DebugQuantizer(f"{self.name}.{prefix}", ...)` with prefix fc1/fc2), but both
  live in the one fused module, which has no `fc1`/`fc2` children.
torch is imported lazily so that `client.apply` imports without it (the TE debug YAML needs no torch).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

ROOT = "model"
# Attribute names that wrappers put between the root and the real model. `module` (DDP, Megatron
# Float16Module / DDP) is only a wrapper level at the start of the path; the others anywhere.
LEADING_WRAPPERS = frozenset({"module"})
ANYWHERE_WRAPPERS = frozenset({"_fsdp_wrapped_module", "_fpw_module", "_checkpoint_wrapped_module", "_orig_mod"})
FUSED_PARTS = {"LayerNormMLP": ("fc1", "fc2")}  # TE class name -> GEMM names it logs as sub-layers
HEAD_LEAVES = frozenset({"lm_head", "output", "output_layer", "head", "classifier", "embed_out", "score"})


@dataclass(frozen=True, slots=True)
class LoggedModule:
    """One module under the name nvdlfw_inspect logs for it.

    name: the logged name; fqn: its path in `named_modules()` of its chunk (what torchao filters on);
    chunk: index of the model chunk (0 unless a list of chunks was given); part: `fc1`/`fc2` when the
    name is a GEMM of a fused module (`module` is then the fused module itself).
    """

    name: str
    fqn: str
    module: nn.Module
    chunk: int = 0
    part: str | None = None


@dataclass(frozen=True, slots=True)
class Unmatched:
    """A policy name that matches no module, with the closest names this model has."""

    name: str
    suggestions: tuple[str, ...] = ()

    def message(self) -> str:
        if not self.suggestions:
            return f"`{self.name}` not found"
        return f"`{self.name}` not found; did you mean " + " or ".join(f"`{s}`" for s in self.suggestions) + "?"


class UnmatchedLayers(LookupError):
    """Policy layer names that match no module of the model (nothing was changed)."""

    def __init__(self, unmatched: Sequence[Unmatched]) -> None:
        self.unmatched = tuple(unmatched)
        lines = [f"{len(self.unmatched)} policy layer name(s) match no module of this model:"]
        lines += [f"  {item.message()}" for item in self.unmatched]
        lines.append(
            "A name that matches nothing would leave that layer in FP8; fix the name or pass "
            "allow_unmatched=True to continue anyway."
        )
        super().__init__("\n".join(lines))


def normalize(name: str) -> str:
    """`name` without wrapper levels: `model.module.module.decoder.x` -> `model.decoder.x`."""
    parts = name.split(".")
    head, rest = parts[:1], parts[1:]
    while rest and rest[0] in LEADING_WRAPPERS:
        rest = rest[1:]
    return ".".join(head + [part for part in rest if part not in ANYWHERE_WRAPPERS])


def fused_parts(module: nn.Module) -> tuple[str, ...]:
    """The GEMM names a fused TE module logs under its own name (empty for ordinary modules)."""
    for cls in type(module).__mro__:
        if cls.__name__ in FUSED_PARTS:
            return FUSED_PARTS[cls.__name__]
    return ()


def walk(model: nn.Module | Sequence[nn.Module]) -> list[LoggedModule]:
    """Every named module, in the order nvdlfw_inspect names them, plus fused GEMM aliases."""
    from torch import nn

    chunks: list[nn.Module] = [model] if isinstance(model, nn.Module) else list(model)
    out: list[LoggedModule] = []

    def visit(module: nn.Module, name: str, fqn: str, chunk: int) -> None:
        def join(child: str) -> str:
            return f"{fqn}.{child}" if fqn else child

        if isinstance(module, nn.ModuleList):  # unnamed itself; children by layer_number or index
            for key, child in module.named_children():
                visit(child, f"{name}.{getattr(child, 'layer_number', key)}", join(key), chunk)
            return
        out.append(LoggedModule(name, fqn, module, chunk))
        for key, child in module.named_children():
            visit(child, f"{name}.{key}", join(key), chunk)

    for index, chunk_module in enumerate(chunks):
        visit(chunk_module, ROOT, "", index)
    aliases = [
        LoggedModule(f"{e.name}.{part}", e.fqn, e.module, e.chunk, part) for e in out for part in fused_parts(e.module)
    ]
    return out + aliases


class NameIndex:
    """Logged names of one model (or list of chunks), looked up exactly or without wrapper levels."""

    def __init__(self, model: nn.Module | Sequence[nn.Module]) -> None:
        self.entries = walk(model)
        self.exact: dict[str, list[LoggedModule]] = {}
        for entry in self.entries:
            if entry.part is not None and entry.name in self.exact:
                continue  # a real child named fc1/fc2 wins over the fused alias
            self.exact.setdefault(entry.name, []).append(entry)
        self.normalized: dict[str, list[LoggedModule]] = {}
        for name, found in self.exact.items():
            key = normalize(name)
            kept = self.normalized.get(key)
            # Wrapper and wrapped normalise alike (DDP `model` / `model.module`): keep the innermost.
            if kept is None or len(kept[0].name) < len(name):
                self.normalized[key] = found

    def resolve(self, name: str) -> tuple[list[LoggedModule], str] | None:
        """(modules, how) for a logged name: how is `exact` or `wrapper levels`; None when unmatched."""
        if name in self.exact:
            return self.exact[name], "exact"
        found = self.normalized.get(normalize(name))
        return (found, "wrapper levels") if found else None

    def suggest(self, name: str, limit: int = 3) -> tuple[str, ...]:
        """Closest logged names of this model: same-role heads first, then difflib matches."""
        candidates = [n for n in self.exact if n != ROOT]
        by_key: dict[str, str] = {}
        for candidate in candidates:
            by_key.setdefault(normalize(candidate), candidate)
        key = normalize(name)
        found: list[str] = []
        if key.rsplit(".", 1)[-1] in HEAD_LEAVES:  # a head under another name is the likeliest mistake
            found = [k for k in by_key if k.rsplit(".", 1)[-1] in HEAD_LEAVES]
            found.sort(key=lambda k: -difflib.SequenceMatcher(None, key, k).ratio())
        if not found:
            found = difflib.get_close_matches(key, list(by_key), n=limit, cutoff=0.6)
        return tuple(by_key[k] for k in found[:limit])


def resolve_names(
    index: NameIndex,
    names: Iterable[str],
) -> tuple[dict[str, tuple[list[LoggedModule], str]], list[Unmatched]]:
    """Resolve every name once: ({name: (modules, how)}, unmatched with suggestions), in input order."""
    resolved: dict[str, tuple[list[LoggedModule], str]] = {}
    unmatched: list[Unmatched] = []
    for name in dict.fromkeys(names):
        hit = index.resolve(name)
        if hit is None:
            unmatched.append(Unmatched(name, index.suggest(name)))
        else:
            resolved[name] = hit
    return resolved, unmatched
