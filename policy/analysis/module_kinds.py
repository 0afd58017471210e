"""Module kinds of a transformer block (mixture-of-experts aware) and the two findings they allow: one kind failing
in every block (`module_kind`), and a routed expert standing out from its sibling experts (`expert_outlier`).

Belongs here: naming a layer's kind from its logged name, grouping routed experts with their siblings, and those two
detectors. Must not be here: depth patterns (patterns.py), bands (thresholds.py), rendering.

Kinds, from the frameworks' module names:
* routed experts: TE `GroupedLinear` GEMMs `<module>.gemm_<i>` (Megatron-Core TEGroupedMLP,
  megatron/core/transformer/moe/experts.py), Megatron `SequentialMLP`'s `experts.local_experts.<i>.<linear>`, and
  Hugging Face `experts.<i>.<proj>` (Mixtral `block_sparse_moe.experts.<i>.w1`, Qwen-MoE `mlp.experts.<i>.up_proj`);
* shared experts: a `shared_experts` / `shared_expert` component (Megatron `SharedExpertMLP`, Qwen2-MoE);
* attention: the attention projections, MLA's included (`linear_q_proj`, `linear_q_down_proj`, `linear_q_up_proj`,
  `linear_kv_down_proj`, `linear_kv_up_proj`, `linear_qkv_down_proj`: megatron/core/transformer/
  multi_latent_attention.py), and anything under an attention module;
* dense MLP: the other fc1/fc2-like GEMMs of a block.
Rules:
* `module_kind`: a module of the block (its path inside the block, expert numbers folded: `module_role`) fails
  (at or above critical, the layer's own bands) in at least `KIND_BLOCK_SHARE` of the blocks where it was observed
  (and at least `KIND_MIN_BLOCKS`), with at least half of its layers failing, while fewer than `KIND_OTHER_SHARE`
  of all other modules' layers fail: the cause is the module kind ("shared experts fail in every block", "MLA's
  up-projections"), not the depth, so those layers are not reported as early/late/U-shape. One finding per kind.
* `expert_outlier`: a routed expert's level for a tensor at or above warning that exceeds the median of its sibling
  experts (same grouped module or expert slot, same block; at least 3 siblings) by `EXPERT_RATIO` times and by the
  warning band. One finding for all of them, grouped by expert number, at the worst band of its evidence.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict

import numpy as np

from fp8_policy.policy.analysis.findings import Evidence, Finding, Pattern
from fp8_policy.policy.analysis.layout import LayerLevels, Layout
from fp8_policy.policy.analysis.signals import onset
from fp8_policy.policy.names import block_index_at
from fp8_policy.policy.records import LayerGroup, LayerInfo
from fp8_policy.policy.thresholds import Severity, Thresholds, worst

ROUTED, SHARED, ATTENTION, DENSE_MLP, OTHER = "routed_experts", "shared_experts", "attention", "dense_mlp", "other"
KIND_LABELS = {
    ROUTED: "routed experts",
    SHARED: "shared experts",
    ATTENTION: "attention",
    DENSE_MLP: "dense MLP",
    OTHER: "other layers",
}
KIND_BLOCK_SHARE = 0.75
KIND_MIN_BLOCKS = 3
KIND_OTHER_SHARE = 0.25
EXPERT_RATIO = 2.0
MIN_SIBLINGS = 3
MAX_NAMED = 4

_GEMM = re.compile(r"^gemm_(\d+)$")
_ATTENTION_PARTS = frozenset({"self_attention", "self_attn", "attention", "attn", "cross_attention", "inter_attention"})
_MLA = frozenset(
    {
        "linear_q_proj",
        "linear_q_down_proj",
        "linear_q_up_proj",
        "linear_kv_down_proj",
        "linear_kv_up_proj",
        "linear_qkv_down_proj",
    }
)
_ATTENTION_SUBLAYERS = frozenset({"qkv", "q", "k", "v", "kv", "proj"})


def expert_slot(name: str) -> tuple[str, int] | None:
    """(the module path with the expert number replaced by `*`, the expert number) of a routed-expert layer."""
    parts = name.split(".")
    gemm = _GEMM.match(parts[-1])
    if gemm is not None and len(parts) > 1:
        return ".".join(parts[:-1]), int(gemm.group(1))
    for pos in range(len(parts) - 2, 0, -1):
        if parts[pos - 1] in ("experts", "local_experts") and parts[pos].isascii() and parts[pos].isdigit():
            return ".".join([*parts[:pos], "*", *parts[pos + 1 :]]), int(parts[pos])
    return None


def module_kind(info: LayerInfo) -> str:
    """The kind of a body layer (module docstring); `other` outside the blocks."""
    if info.structure.group is not LayerGroup.BODY:
        return OTHER
    parts = info.name.split(".")
    if any(part in ("shared_experts", "shared_expert") for part in parts):
        return SHARED
    if expert_slot(info.name) is not None:
        return ROUTED
    if parts[-1] in _MLA or _ATTENTION_PARTS & set(parts):
        return ATTENTION
    base = (info.structure.sublayer or "").split(".gemm_")[0].rsplit(".", 1)[-1].removeprefix("cross_")
    if base in _ATTENTION_SUBLAYERS:
        return ATTENTION
    return DENSE_MLP if base in ("fc1", "fc2", "layernorm_mlp") else OTHER


def module_role(lv: LayerLevels) -> str:
    """The layer's module inside its block, expert numbers folded (`mlp.shared_experts.linear_fc1`,
    `self_attention.linear_kv_up_proj`, `mlp.experts.linear_fc2` for every `.gemm_<i>`)."""
    found = block_index_at(lv.name)
    inner = lv.name.split(".")[found[0] + 1 :] if found is not None else [lv.name]
    slot = expert_slot(".".join(inner))
    return slot[0] if slot is not None else ".".join(inner)


def detect_module_kind(layout: Layout, failing: list[LayerLevels], thresholds: Thresholds) -> list[Finding]:
    """`module_kind` findings over `failing` (the layers no earlier detector explained): one per kind whose modules
    fail in (nearly) every block while the other modules stay healthy (module docstring)."""
    body = [lv for lv in layout.fp8() if lv.block is not None]
    names = {lv.name for lv in failing}
    by_role: dict[str, list[LayerLevels]] = defaultdict(list)
    for lv in body:
        by_role[module_role(lv)].append(lv)
    hit: dict[str, list[str]] = defaultdict(list)  # kind -> its roles failing in (nearly) every block
    for role, members in by_role.items():
        bad = [lv for lv in members if lv.name in names]
        blocks, bad_blocks = {lv.block for lv in members}, {lv.block for lv in bad}
        if len(bad_blocks) >= max(KIND_MIN_BLOCKS, math.ceil(KIND_BLOCK_SHARE * len(blocks))) and len(bad) >= (
            0.5 * len(members)
        ):
            hit[module_kind(members[0].info)].append(role)
    roles = {role for found in hit.values() for role in found}
    others = [lv for lv in body if module_role(lv) not in roles]
    if not hit or (others and sum(1 for lv in others if lv.failing) >= KIND_OTHER_SHARE * len(others)):
        return []
    findings = []
    for kind, kind_roles in hit.items():
        members = [lv for role in kind_roles for lv in by_role[role]]
        bad = [lv for lv in members if lv.name in names]
        n_blocks = len({lv.block for lv in members})
        findings.append(_kind_finding(kind, kind_roles, bad, n_blocks, others, thresholds))
    return findings


def _kind_finding(
    kind: str, roles: list[str], bad: list[LayerLevels], n_blocks: int, others: list[LayerLevels], th: Thresholds
) -> Finding:
    top = max(bad, key=lambda lv: max(s.level for s in lv.tensors.values()))
    tensor, summary = max(top.tensors.items(), key=lambda item: item[1].level)
    n_bad = len({lv.block for lv in bad})
    where = "in every block" if n_bad == n_blocks else f"in {n_bad} of {n_blocks} blocks"
    kinds = sorted({KIND_LABELS[module_kind(lv.info)] for lv in others})
    rest = f"; the other modules ({', '.join(kinds)}) stay below critical" if kinds else ""
    text = (
        f"{KIND_LABELS[kind].capitalize()} ({', '.join(roles)}) fail {where} ({len(bad)} failing layer(s)); worst "
        f"{tensor} underflows% {summary.level:.2f}% at {top.name} (critical >= {top.bands(th).critical:g}%){rest}: "
        "the cause is this module kind, not the depth."
    )
    evidence = tuple(
        lv.tensors[t].evidence(onset=onset(lv.tensors[t], lv.bands(th).warning)) for lv in bad for t in lv.failing
    )
    return Finding(Pattern.MODULE_KIND, worst(lv.severity for lv in bad), tuple(lv.name for lv in bad), evidence, text)


def detect_expert_outliers(layout: Layout, thresholds: Thresholds) -> list[Finding]:
    """One `expert_outlier` finding for every routed expert standing out from its siblings (module docstring)."""
    groups: dict[tuple[int | None, str], list[LayerLevels]] = defaultdict(list)
    for lv in layout.fp8():
        slot = expert_slot(lv.name)
        if slot is not None:
            groups[(lv.block, slot[0])].append(lv)
    evidence: list[tuple[int, Evidence, Severity]] = []
    for members in groups.values():
        if len(members) < MIN_SIBLINGS + 1:
            continue
        for lv in members:
            th = lv.bands(thresholds)
            for tensor, summary in lv.tensors.items():
                siblings = [o.tensors[tensor].level for o in members if o is not lv and tensor in o.tensors]
                if len(siblings) < MIN_SIBLINGS:
                    continue
                median = float(np.median(siblings))
                level = summary.level
                if level >= th.warning and level >= EXPERT_RATIO * median and level - median >= th.warning:
                    ev = summary.evidence(onset=onset(summary, th.warning), reference=median)
                    evidence.append((expert_slot(lv.name)[1], ev, th.band(level)))  # type: ignore[index]
    if not evidence:
        return []
    return [_outlier_finding(evidence)]


def _outlier_finding(evidence: list[tuple[int, Evidence, Severity]]) -> Finding:
    by_expert: dict[int, set[str]] = defaultdict(set)
    for expert, ev, _band in evidence:
        by_expert[expert].add(ev.layer)
    _e, top, _b = max(evidence, key=lambda item: item[1].level or 0.0)
    experts = ", ".join(f"expert {e} ({len(layers)} layer(s))" for e, layers in sorted(by_expert.items()))
    text = (
        f"Routed-expert outlier(s): {experts} stand out from their sibling experts; worst {top.tensor} underflows% "
        f"{top.level:.2f}% at {top.layer} against its siblings' median {top.reference:.2f}%: a hot or imbalanced "
        "expert, judged against the experts beside it, not a depth pattern."
    )
    layers = tuple(dict.fromkeys(ev.layer for _e, ev, _b in evidence))
    severity = max(Severity.WARNING, worst(band for _e, _ev, band in evidence))
    return Finding(Pattern.EXPERT_OUTLIER, severity, layers, tuple(ev for _e, ev, _b in evidence), text)
