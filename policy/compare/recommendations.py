"""The two runs' recommendations side by side: BF16 sets, GEMM overrides, recipe and predicted cost.

Belongs here: the difference of two `Recommendation`s as JSON values and one sentence per difference.
"""

from __future__ import annotations

from typing import Any

from fp8_policy.policy.analysis.recipes import RECIPE_LABELS
from fp8_policy.policy.recommend import Recommendation


def compare_recommendations(base: Recommendation, head: Recommendation) -> dict[str, Any]:
    b, h = base.decision, head.decision
    skips_b, skips_h = list(dict.fromkeys(b.skip_layers)), list(dict.fromkeys(h.skip_layers))
    over_b = {o.layer: list(o.gemms) for o in b.gemm_overrides}
    over_h = {o.layer: list(o.gemms) for o in h.gemm_overrides}
    cost_b, cost_h = base.expected_cost, head.expected_cost
    out: dict[str, Any] = {
        "skip_layers": {
            "base": skips_b,
            "head": skips_h,
            "added": [n for n in skips_h if n not in skips_b],
            "removed": [n for n in skips_b if n not in skips_h],
        },
        "gemm_overrides": {
            "base": _overrides(over_b),
            "head": _overrides(over_h),
            "added": _overrides({k: v for k, v in over_h.items() if k not in over_b}),
            "removed": _overrides({k: v for k, v in over_b.items() if k not in over_h}),
            "changed": [
                {"layer": k, "base": over_b[k], "head": v} for k, v in over_h.items() if k in over_b and over_b[k] != v
            ],
        },
        "recipe": {
            "base": b.recipe.name,
            "head": h.recipe.name,
            "base_label": RECIPE_LABELS[b.recipe.name],
            "head_label": RECIPE_LABELS[h.recipe.name],
            "changed": b.recipe.name != h.recipe.name,
        },
        "expected_cost": {
            key: {"base": cost_b.get(key), "head": cost_h.get(key)}
            for key in ("bf16_gemm_share", "gemm_slowdown_vs_all_fp8_pct", "gemm_speedup_vs_all_bf16")
        },
        "confidence": {"base": base.confidence, "head": head.confidence},
        "policy_version": head.policy_version,
    }
    out["same"] = not (
        out["skip_layers"]["added"]
        or out["skip_layers"]["removed"]
        or out["gemm_overrides"]["added"]
        or out["gemm_overrides"]["removed"]
        or out["gemm_overrides"]["changed"]
        or out["recipe"]["changed"]
    )
    out["summary"] = _sentences(out)
    return out


def _overrides(mapping: dict[str, list[str]]) -> list[dict[str, Any]]:
    return [{"layer": layer, "gemms": gemms} for layer, gemms in mapping.items()]


def _sentences(diff: dict[str, Any]) -> list[str]:
    out = []
    skips, overrides, recipe = diff["skip_layers"], diff["gemm_overrides"], diff["recipe"]
    if diff["same"]:
        out.append(
            f"recommendations agree: {len(skips['head'])} layer(s) to BF16, {len(overrides['head'])} GEMM "
            f"override(s), {recipe['head_label']}"
        )
    else:
        if skips["added"] or skips["removed"]:
            out.append(
                f"recommended BF16 layers {len(skips['base'])} → {len(skips['head'])} "
                f"(+{len(skips['added'])}, −{len(skips['removed'])})"
            )
        if overrides["added"] or overrides["removed"] or overrides["changed"]:
            out.append(
                f"GEMM overrides {len(overrides['base'])} → {len(overrides['head'])} "
                f"(+{len(overrides['added'])}, −{len(overrides['removed'])}, {len(overrides['changed'])} "
                "changed)"
            )
        if recipe["changed"]:
            out.append(f"recommended recipe {recipe['base_label']} → {recipe['head_label']}")
    share = diff["expected_cost"]["bf16_gemm_share"]
    slow = diff["expected_cost"]["gemm_slowdown_vs_all_fp8_pct"]
    if share["base"] is not None and share["head"] is not None and share["base"] != share["head"]:
        text = f"predicted BF16 share of GEMM FLOPs {share['base']:.1%} → {share['head']:.1%}"
        if slow["base"] is not None and slow["head"] is not None:
            text += f" (GEMM time {slow['base']:.1f}% → {slow['head']:.1f}% above all-FP8)"
        out.append(text)
    return out
