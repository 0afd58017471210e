"""The one cost of an answer: shares of GEMM FLOPs in FP4 / FP8 / BF16 and the GEMM speed they imply.

Rules:
* FLOPs per token of one GEMM (fprop; dgrad and wgrad cost the same, so a layer is 3 equal GEMMs), from model dims:
  qkv 2·h·(h + 2·kv), q 2·h·h, k/v 2·h·kv, kv 2·h·2kv (kv = h·query_groups/heads with GQA, else h), proj 2·h·h,
  fc1 2·h·ffn (×2 when gated), fc2 2·ffn·h, a LayerNormMLP fc1+fc2, head 2·h·vocab (a head `dense` 2·h·h).
  The sequence length multiplies every GEMM alike, so shares do not depend on it.
* Without the dims a layer needs (or for an unknown sublayer), every GEMM layer counts equally.
* Every GEMM layer of the run counts (named as one, or given a precision by the answer), each at the precision the
  answer runs it at (`runs_at`, recommend/runs_at.py, as apply_policy's TE backend applies the ladder: its rung,
  BF16 for the BF16 set, the recommended recipe for layers without a rung); a GEMM override counts its GEMMs as BF16. GEMM time = sum(share / speedup) with ONE table of speedups over BF16
  (`SPEEDUPS`, `SOURCE`): Blackwell runs take the B300 figures, others the H200 ones, and a precision missing on
  one GPU's row takes the other's (named in `speedups`). Reported once per answer (`expected_cost`): the speedup
  over all-BF16 GEMMs, the time against every layer at the recommended recipe and against the run as logged.
  End-to-end gains are smaller (non-GEMM time).
* The cost is stated once, not per format, so its `assumptions` say which application it counts and where a format
  runs otherwise (the JSON `formats` say what each runs); the Megatron script runs every head in BF16 whatever is
  asked (output_layer is not a TE module, policy/render/megatron_head.py), bionemo's Hydra recipe too
  (policy/render/hydra.py): those heads are named there.
"""

from __future__ import annotations

from typing import Any

from fp8_policy.policy.analysis.layout import LayerLevels, LayerStatus, Layout, is_gemm_layer
from fp8_policy.policy.recommend.options import ModelDims
from fp8_policy.policy.records import GEMMS, GemmOverride, LayerGroup
from fp8_policy.policy.render.applied import names

# Autocast GEMM speedups over BF16 for a 5B config (hidden 4096, intermediate 16384, 24 layers), Transformer Engine
# docs/features/low_precision_training/speedups.rst ("GEMM Speedups Across Precisions"): B300: NVFP4 ~2.03x,
# DelayedScaling 1.61x, MXFP8 ~1.44x, CurrentScaling 1.41x; H200 NVL: DelayedScaling ~1.69x, CurrentScaling ~1.57x,
# Block scaling ~1.41x. The one table every figure of an answer comes from.
SPEEDUPS: dict[str, dict[str, float]] = {
    "B300": {"nvfp4": 2.03, "delayed": 1.61, "mxfp8": 1.44, "current": 1.41},
    "H200": {"delayed": 1.69, "current": 1.57, "block": 1.41},
}
SOURCE = (
    "Transformer Engine docs, 'GEMM Speedups Across Precisions' (5B config, autocast): B300 NVFP4 2.03x, "
    "Delayed 1.61x, MXFP8 1.44x, Current 1.41x; H200 Delayed 1.69x, Current 1.57x, Block 1.41x - "
    "https://nvidia.github.io/TransformerEngine/features/low_precision_training/speedups.html"
)
PRECISION_CLASS: dict[str, str] = {
    "nvfp4": "fp4",
    "mxfp8": "fp8",
    "block": "fp8",
    "current": "fp8",
    "delayed": "fp8",
    "bf16": "bf16",
}


def gemm_flops(lv: LayerLevels, dims: ModelDims) -> float | None:
    """FLOPs per token of one of the layer's three GEMMs, or None when the dims or the sublayer are unknown."""
    h, ffn = dims.hidden_size, dims.ffn_hidden_size
    if h is None:
        return None
    structure = lv.info.structure
    sub = (structure.sublayer or "").split(".gemm_")[0].rsplit(".", 1)[-1].removeprefix("cross_")
    if structure.group is LayerGroup.HEAD:
        if "dense" in (structure.sublayer or ""):
            return 2.0 * h * h
        return 2.0 * h * dims.vocab_size if dims.vocab_size else None
    kv = (
        h * dims.num_query_groups / dims.num_attention_heads
        if (dims.num_query_groups and dims.num_attention_heads)
        else float(h)
    )
    attention = {
        "qkv": 2.0 * h * (h + 2 * kv),
        "q": 2.0 * h * h,
        "k": 2.0 * h * kv,
        "v": 2.0 * h * kv,
        "kv": 4.0 * h * kv,
        "proj": 2.0 * h * h,
    }
    if sub in attention:
        return attention[sub]
    if ffn is None:
        return None
    mlp = {"fc1": 2.0 * h * ffn * (2 if dims.gated_mlp else 1), "fc2": 2.0 * ffn * h}
    mlp["layernorm_mlp"] = mlp["fc1"] + mlp["fc2"]
    return mlp.get(sub)


def _weights(layers: list[LayerLevels], dims: ModelDims) -> tuple[dict[str, float], str, list[str]]:
    flops = {lv.name: gemm_flops(lv, dims) for lv in layers}
    missing = [name for name, value in flops.items() if value is None]
    if not missing and flops:
        return {name: float(value) for name, value in flops.items()}, "dims", []  # type: ignore[arg-type]
    return {lv.name: 1.0 for lv in layers}, "layer_count", missing


def counted(lv: LayerLevels, runs_at: dict[str, str]) -> bool:
    """A GEMM layer of the answer: one named as a GEMM (`is_gemm_layer`), or one the answer gives a precision (its
    FP8 statistics say it is a GEMM whatever its name: `model.0` of an nn.Sequential)."""
    return lv.status is not LayerStatus.IGNORED and (is_gemm_layer(lv.info) or lv.name in runs_at)


def speedup(precision: str, capability: float | None) -> tuple[float, str]:
    """(GEMM speedup over BF16, GPU it was measured on) for one precision on a GPU of this capability."""
    if precision == "bf16":
        return 1.0, "-"
    blackwell = capability is not None and capability >= 10.0
    gpu, other = ("B300", "H200") if blackwell else ("H200", "B300")
    if precision in SPEEDUPS[gpu]:
        return SPEEDUPS[gpu][precision], gpu
    return SPEEDUPS[other][precision], other


def answer_cost(
    layout: Layout,
    runs_at: dict[str, str],
    overrides: tuple[GemmOverride, ...],
    outer: str,
    as_logged: str,
    dims: ModelDims,
    capability: float | None,
) -> dict[str, Any]:
    """The answer's cost (module rules). `runs_at`: layer -> the precision it runs at (layers not in it: `outer`, or
    BF16 when they ran in BF16); `as_logged`: the recipe the run trained in (`bf16` for a run in high precision)."""
    layers = [lv for lv in layout.levels.values() if counted(lv, runs_at)]
    weights, method, missing = _weights(layers, dims)
    total = 3.0 * sum(weights.values())
    if total == 0:
        share0 = {"fp4": 0.0, "fp8": 0.0, "bf16": 0.0}
        return {"method": method, "bf16_gemm_share": 0.0, "gemm_share": share0, "note": "no GEMM layers"}
    overridden = {o.layer: len(set(o.gemms) & set(GEMMS)) for o in overrides}
    shares = {"fp4": 0.0, "fp8": 0.0, "bf16": 0.0}
    time = time_outer = time_logged = logged_bf16 = 0.0
    used: dict[str, tuple[float, str]] = {}
    for lv in layers:
        ran_bf16 = lv.status is LayerStatus.BF16
        precision = runs_at.get(lv.name, "bf16" if ran_bf16 else outer)
        bf16_gemms = 3 if precision == "bf16" else overridden.get(lv.name, 0)
        weight = weights[lv.name] / total
        factor, gpu = speedup(precision, capability)
        used[precision] = (factor, gpu)
        shares[PRECISION_CLASS[precision]] += (3 - bf16_gemms) * weight
        shares["bf16"] += bf16_gemms * weight
        time += (3 - bf16_gemms) * weight / factor + bf16_gemms * weight
        time_outer += 3 * weight / speedup(outer, capability)[0]
        time_logged += 3 * weight / speedup("bf16" if ran_bf16 else as_logged, capability)[0]
        logged_bf16 += 3 * weight if ran_bf16 else 0.0
    outer_factor, outer_gpu = speedup(outer, capability)
    out: dict[str, Any] = {
        "method": method,
        "gemm_share": {key: round(value, 4) for key, value in shares.items()},
        "bf16_gemm_share": round(shares["bf16"], 4),
        "bf16_gemm_share_as_logged": round(logged_bf16, 4),
        "moved_to_bf16_share": round(shares["bf16"] - logged_bf16, 4),
        "fp8_recipe": outer,
        "fp8_gemm_speedup": outer_factor,
        "speedup_measured_on": outer_gpu,
        "gemm_speedup_vs_all_bf16": round(1.0 / time, 4),
        "gemm_time_vs_all_fp8": round(time / time_outer, 4),
        "gemm_slowdown_vs_all_fp8_pct": round(100.0 * (time / time_outer - 1.0), 2),
        "gemm_time_vs_as_logged": round(time / time_logged, 4),
        "as_logged_recipe": as_logged,
        "speedups": {p: {"vs_bf16": f, "measured_on": g} for p, (f, g) in sorted(used.items())},
        "source": SOURCE,
        "assumptions": "GEMM time = sum(share / speedup); fprop, dgrad and wgrad cost the same; speedups are "
        "TE's autocast figures for one 5B config (shape-dependent); non-GEMM time is not included, so end-to-end "
        "changes are smaller; all-FP8 means every GEMM layer at the recommended recipe; each layer counts at the "
        "precision apply_policy's TE backend runs it at (its ladder rung under its own te.autocast, overrides per "
        "GEMM): the TE debug YAML applies only the BF16 set, torchao and the Megatron script run overridden modules "
        "whole in BF16, torchao runs nvfp4 rungs as float8, bionemo's fp8_layers applies rungs per block"
        + _megatron_heads(layers, {name for name, p in runs_at.items() if p == "bf16"})
        + "; their shares differ (the JSON formats say what each runs)",
    }
    if method == "dims" and dims.seq_len:
        out["gemm_flops_per_sequence"] = total * dims.seq_len
    if missing and dims.hidden_size:
        out["missing_dims_for"] = missing[:5]
    elif method == "layer_count":
        out["note"] = "no model dims given: every GEMM layer counts equally"
    return out


def ladder_view(cost: dict[str, Any]) -> dict[str, Any]:
    """`precision_ladder.expected_cost`: the same figures as the answer's `expected_cost` (cited there once)."""
    keys = ("method", "gemm_share", "gemm_speedup_vs_all_bf16", "gemm_time_vs_as_logged", "as_logged_recipe")
    out = {key: cost[key] for key in (*keys, "speedups", "missing_dims_for") if key in cost}
    out["note"] = "the answer's one cost: the same figures as expected_cost, whose source and assumptions apply"
    return out


def _megatron_heads(layers: list[LayerLevels], bf16: set[str]) -> str:
    """The clause naming the heads counted in low precision that Megatron and bionemo run in BF16 ('' if none)."""
    low = [
        lv.name
        for lv in layers
        if lv.info.structure.group is LayerGroup.HEAD and lv.name not in bf16 and lv.status is not LayerStatus.BF16
    ]
    if not low:
        return ""
    return (
        f", and the Megatron script and bionemo's Hydra recipe run {names(low)} in BF16 (Megatron's output_layer is "
        "not a TE module; bionemo builds its LM head under te.autocast(enabled=False))"
    )
