"""Expected cost of a plan: share of GEMM FLOPs moved to BF16 and the GEMM throughput change it implies.

Rules:
* FLOPs per token of one GEMM (fprop; dgrad and wgrad cost the same, so a layer is 3 equal GEMMs), from model dims:
  qkv 2·h·(h + 2·kv), q 2·h·h, k/v 2·h·kv, kv 2·h·2kv (kv = h·query_groups/heads with GQA, else h), proj 2·h·h,
  fc1 2·h·ffn (×2 when gated), fc2 2·ffn·h, a LayerNormMLP fc1+fc2, head 2·h·vocab (a head `dense` 2·h·h).
  The sequence length multiplies every GEMM alike, so shares do not depend on it.
* Without the dims a layer needs (or for an unknown sublayer), every GEMM layer counts equally.
* GEMM time ∝ fp8_share / speedup + bf16_share, with TE's published GEMM speedups vs BF16 (cost.SOURCE):
  Delayed 1.69×, Current 1.58×, Block 1.40× on H200; MXFP8 1.42×, NVFP4 2.03× on B300 (5B config, autocast).
  Reported: the slowdown vs all-low-precision GEMMs and the speedup left vs all-BF16 GEMMs. End-to-end gains are
  smaller (non-GEMM time).
* `ladder_cost`: the precision ladder's shares of GEMM FLOPs in FP4 / FP8 / BF16 (GEMM overrides count their
  GEMMs as BF16) with the per-GPU speedups of TE's current speedups page (Blackwell: B300 figures; Hopper: H200;
  a rung missing on one GPU's page takes the other's figure, named in `speedups`).
* Each cost is stated once, not per format, so its `assumptions` say which application it counts and where a format
  runs otherwise (the JSON `formats` say what each runs): `expected_cost` counts the BF16 set as the TE debug YAML
  applies it, `ladder_cost` the rungs as apply_policy's TE backend runs them; the Megatron script runs every head in
  BF16 whatever is asked (output_layer is not a TE module, policy/render/megatron_head.py), bionemo's Hydra recipe
  too (policy/render/hydra.py): those heads are named there.
"""

from __future__ import annotations

from typing import Any

from fp8_policy.policy.analysis.layout import LayerLevels, LayerStatus, Layout, is_gemm_layer
from fp8_policy.policy.recommend.options import ModelDims
from fp8_policy.policy.recommend.skiplist import SkipPlan
from fp8_policy.policy.records import GEMMS, GemmOverride, LayerGroup
from fp8_policy.policy.render.applied import names

SPEEDUPS: dict[str, tuple[float, str]] = {
    "delayed": (1.69, "H200"),
    "current": (1.58, "H200"),
    "block": (1.40, "H200"),
    "mxfp8": (1.42, "B300"),
    "nvfp4": (2.03, "B300"),  # the same page, current version (below)
}
SOURCE = (
    "Transformer Engine docs, 'GEMM Speedups Across Precisions' (5B config, autocast): Delayed 1.69x, "
    "Current 1.58x, Block 1.40x on H200; MXFP8 1.42x, NVFP4 2.03x on B300 - "
    "https://nvidia.github.io/TransformerEngine/features/low_precision_training/speedups.html"
)


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


def expected_cost(layout: Layout, plan: SkipPlan, recipe: str, dims: ModelDims) -> dict[str, Any]:
    layers = [lv for lv in layout.levels.values() if lv.status is not LayerStatus.IGNORED and is_gemm_layer(lv.info)]
    weights, method, missing = _weights(layers, dims)
    total = 3.0 * sum(weights.values())
    if total == 0:
        return {"method": method, "bf16_gemm_share": 0.0, "note": "no GEMM layers"}
    as_logged = 3.0 * sum(weights[lv.name] for lv in layers if lv.status is LayerStatus.BF16) / total
    share = _bf16_flops(weights, plan.bf16_layers, plan.overrides) / total
    speedup, gpu = SPEEDUPS[recipe]
    time_now = (1.0 - share) / speedup + share
    out: dict[str, Any] = {
        "method": method,
        "bf16_gemm_share": round(share, 4),
        "bf16_gemm_share_as_logged": round(as_logged, 4),
        "moved_to_bf16_share": round(share - as_logged, 4),
        "fp8_recipe": recipe,
        "fp8_gemm_speedup": speedup,
        "speedup_measured_on": gpu,
        "gemm_time_vs_all_fp8": round(time_now * speedup, 4),
        "gemm_slowdown_vs_all_fp8_pct": round(100.0 * (time_now * speedup - 1.0), 2),
        "gemm_speedup_vs_all_bf16": round(1.0 / time_now, 4),
        "source": SOURCE,
        "assumptions": "GEMM time ∝ fp8_share/speedup + bf16_share; fprop, dgrad and wgrad cost the same; "
        "layers already in BF16 stay in BF16; non-GEMM time is not included, so end-to-end "
        "changes are smaller; the BF16 set counted is the TE debug YAML's (skipped layers whole, overrides per "
        "GEMM): torchao and the Megatron script run overridden modules whole in BF16, bionemo's fp8_layers whole "
        "blocks"
        + _megatron_heads(layers, set(plan.bf16_layers) | {o.layer for o in plan.overrides})
        + ", so their BF16 shares are higher (the JSON formats say what each runs)",
    }
    if method == "dims" and dims.seq_len:
        out["gemm_flops_per_sequence"] = total * dims.seq_len
    if missing and dims.hidden_size:
        out["missing_dims_for"] = missing[:5]
    elif method == "layer_count":
        out["note"] = "no model dims given: every GEMM layer counts equally"
    return out


def _bf16_flops(weights: dict[str, float], skips: tuple[str, ...], overrides: tuple[GemmOverride, ...]) -> float:
    flops = sum(3.0 * weights.get(name, 0.0) for name in skips)
    return flops + sum(len(set(o.gemms) & set(GEMMS)) * weights.get(o.layer, 0.0) for o in overrides)


# --- the precision ladder's cost: FP4 / FP8 / BF16 shares of GEMM FLOPs --------------------------------------------

# Autocast GEMM speedups over BF16 for a 5B config (hidden 4096, ffn 16384, 24 layers) from Transformer Engine's
# "GEMM Speedups Across Precisions" page (docs/features/low_precision_training/speedups.rst):
# B300: NVFP4 ~2.03x, FP8 DelayedScaling 1.61x, MXFP8 ~1.44x, FP8 CurrentScaling 1.41x;
# H200 NVL: DelayedScaling ~1.69x, CurrentScaling ~1.57x, Block scaling ~1.41x.
LADDER_SOURCE = (
    "Transformer Engine docs, 'GEMM Speedups Across Precisions' (5B config, autocast): B300 NVFP4 2.03x, "
    "Delayed 1.61x, MXFP8 1.44x, Current 1.41x; H200 Delayed 1.69x, Current 1.57x, Block 1.41x - "
    "https://nvidia.github.io/TransformerEngine/features/low_precision_training/speedups.html"
)
BLACKWELL_SPEEDUPS: dict[str, float] = {"nvfp4": 2.03, "delayed": 1.61, "mxfp8": 1.44, "current": 1.41}
HOPPER_SPEEDUPS: dict[str, float] = {"delayed": 1.69, "current": 1.57, "block": 1.41}
PRECISION_CLASS: dict[str, str] = {
    "nvfp4": "fp4",
    "mxfp8": "fp8",
    "block": "fp8",
    "current": "fp8",
    "delayed": "fp8",
    "bf16": "bf16",
}


def ladder_speedup(precision: str, capability: float | None) -> tuple[float, str]:
    """(GEMM speedup over BF16, GPU it was measured on) for one rung on a GPU of this capability."""
    if precision == "bf16":
        return 1.0, "-"
    blackwell = capability is not None and capability >= 10.0
    table, gpu = (BLACKWELL_SPEEDUPS, "B300") if blackwell else (HOPPER_SPEEDUPS, "H200")
    if precision in table:
        return table[precision], gpu
    other, other_gpu = (HOPPER_SPEEDUPS, "H200") if blackwell else (BLACKWELL_SPEEDUPS, "B300")
    return other[precision], other_gpu


def ladder_cost(
    layout: Layout,
    rungs: dict[str, str],
    overrides: tuple[GemmOverride, ...],
    as_logged: str,
    dims: ModelDims,
    capability: float | None,
) -> dict[str, Any]:
    """Shares of GEMM FLOPs per precision class under the ladder (`rungs`: layer -> precision; GEMM overrides run
    their GEMMs in BF16), the GEMM speedup over all-BF16 and the GEMM time against the run as logged (every
    ladder layer at `as_logged`, layers already BF16 in BF16). GEMM time is sum(share / speedup)."""
    layers = [lv for lv in layout.levels.values() if lv.name in rungs and is_gemm_layer(lv.info)]
    weights, method, missing = _weights(layers, dims)
    total = 3.0 * sum(weights.values())
    if total == 0:
        return {"method": method, "gemm_share": {"fp4": 0.0, "fp8": 0.0, "bf16": 0.0}, "note": "no GEMM layers"}
    overridden = {o.layer: len(set(o.gemms) & set(GEMMS)) for o in overrides}
    shares = {"fp4": 0.0, "fp8": 0.0, "bf16": 0.0}
    time_ladder = time_logged = 0.0
    used: dict[str, tuple[float, str]] = {}
    for lv in layers:
        precision = rungs[lv.name]
        bf16_gemms = 3 if precision == "bf16" else overridden.get(lv.name, 0)
        low = (3 - bf16_gemms) * weights[lv.name] / total
        high = bf16_gemms * weights[lv.name] / total
        speedup, gpu = ladder_speedup(precision, capability)
        used[precision] = (speedup, gpu)
        shares[PRECISION_CLASS[precision]] += low
        shares["bf16"] += high
        time_ladder += low / speedup + high
        logged = "bf16" if lv.status is LayerStatus.BF16 else as_logged
        time_logged += 3 * weights[lv.name] / total / ladder_speedup(logged, capability)[0]
    out: dict[str, Any] = {
        "method": method,
        "gemm_share": {key: round(value, 4) for key, value in shares.items()},
        "gemm_speedup_vs_all_bf16": round(1.0 / time_ladder, 4),
        "gemm_time_vs_as_logged": round(time_ladder / time_logged, 4),
        "as_logged_recipe": as_logged,
        "speedups": {p: {"vs_bf16": s, "measured_on": g} for p, (s, g) in sorted(used.items())},
        "source": LADDER_SOURCE,
        "assumptions": "GEMM time = sum(share / speedup); fprop, dgrad and wgrad cost the same; speedups are "
        "TE's autocast figures for one 5B config (shape-dependent); non-GEMM time is not included; each layer counts "
        "at its rung as apply_policy's TE backend runs the ladder (a te.autocast per rung): the TE debug YAML "
        "applies only its BF16 set, torchao runs nvfp4 rungs as float8, bionemo's fp8_layers applies rungs per block"
        + _megatron_heads(layers, {name for name, rung in rungs.items() if rung == "bf16"})
        + "; their shares differ (the JSON formats say what each runs)",
    }
    if missing and dims.hidden_size:
        out["missing_dims_for"] = missing[:5]
    elif method == "layer_count":
        out["note"] = "no model dims given: every GEMM layer counts equally"
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
