"""Recipe choice: which TE recipe to train with, its kwargs, and why.

A recipe change is recommended only on evidence: logged what-if stats (rule 1), the run's own logged stats (rules 2
and 3), or a previous run (`prefer_finer`); `RecipeDecision.evidence` names it. Otherwise the recipe is kept, and
when BF16 layers come with delayed scaling, which apply paths work with it is said (rule 4).
Rules 1-2 pick a target (first match wins); rule 3 turns a delayed-scaling target into current scaling (and adds
its reason to any other target):
1. What-if: a recipe the GPU supports whose logged what-if underflows% leaves fewer tensors at or above critical
   and whose median ratio to today's level (over tensors at or above warning) is at most `whatif_gain` → switch
   to the best such recipe (fewest failing, then lowest median ratio, then the faster recipe).
2. `uniform` (more than `uniform_fraction` of FP8 layers failing) → the finest-grained recipe the GPU supports
   (MXFP8 on compute capability ≥ 10, block scaling on ≥ 9, else current scaling) instead of a skip list.
3. Delayed scaling with `overflow` or `scale_instability` → current scaling (per-tensor scales from this step's amax
   cannot overflow and do not lag).
4. Delayed scaling with any transformer-block layer in BF16 (skipped, already BF16 in the run, or with a GEMM
   override) is no reason to switch by itself: the TE debug API YAML keeps those layers / GEMMs in BF16 under
   delayed scaling (DisableFP8Layer / DisableFP8GEMM run the GEMM in high precision inside the same autocast).
   Only Megatron's path cannot: it raises "Delayed scaling does not support first / last layer in BF16"
   (Megatron-LM transformer_config.py), so the `megatron` section uses tensorwise (current) scaling and says so,
   and `apply_paths` names what works with the kept recipe.
GPU capability: from the GPU the metadata or request names (`gpu_arch`, `gpu`, ...: see gpu.py; an unrecognised
name is reported), else inferred from logged what-if stats (TE only computes `mxfp8_*` on ≥ 10 and
`fp8_block_scaling_*` on ≥ 9), else assumed Hopper (9.0) and said so. Current recipe: options, else metadata,
else what the stats show (analysis/formats.py: nvfp4_* without bare stats, overflows%, E8M0 bytes, ...), else
TE's own default for the GPU (`get_default_fp8_recipe`, transformer_engine/pytorch/quantization.py: MXFP8 where
MXFP8 runs — compute capability 10.x and 11.x —, current scaling on 12.0 and above, else delayed), stated as an
assumption. NVFP4 (4-bit) is never a switch target of rules 1-2; an NVFP4 run with `uniform` goes to the finest
FP8 recipe the GPU runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from fp8_policy.policy.analysis.findings import Pattern
from fp8_policy.policy.analysis.layout import LayerLevels
from fp8_policy.policy.analysis.recipes import FP8_RECIPES, PREFIX_RECIPE, RECIPE_LABELS, STAT_PREFIX, supported
from fp8_policy.policy.analysis.result import Analysis
from fp8_policy.policy.recommend.gpu import ASSUMED_CAPABILITY, GpuSpec, compute_capability
from fp8_policy.policy.recommend.skiplist import Bands, LevelFn, SkipPlan
from fp8_policy.policy.records import RECIPE_CLASSES, RecipeChoice

KWARGS: dict[str, dict[str, object]] = {
    "delayed": {"fp8_format": "HYBRID", "amax_history_len": 1024, "amax_compute_algo": "max"},
    "current": {"fp8_format": "HYBRID"},
    "block": {"fp8_format": "E4M3"},
    "mxfp8": {"fp8_format": "E4M3"},
    "nvfp4": {},  # NVFP4BlockScaling's defaults: E2M1 data, E4M3 block scales, RHT, stochastic rounding of gradients
}
SPEED_RANK = {"delayed": 1.69, "current": 1.58, "mxfp8": 1.42, "block": 1.40, "nvfp4": 2.03}  # cost.SOURCE
SHORT = {"delayed": "delayed scaling", "current": "current scaling", "block": "block scaling", "mxfp8": "MXFP8"}
SHORT["nvfp4"] = "NVFP4"
# coarse (per tensor) -> fine (per block); NVFP4 ranks below every FP8 recipe: its fix is more bits, not finer blocks
GRANULARITY = {"nvfp4": -1, "delayed": 0, "current": 1, "block": 2, "mxfp8": 3}


@dataclass(frozen=True, slots=True)
class WhatIf:
    """How a logged what-if recipe compares with the training recipe on the observed FP8 layers."""

    recipe: str
    tensors: int  # (layer, tensor) pairs with both levels
    failing_now: int
    failing_after: int
    median_ratio: float
    levels: dict[tuple[str, str], float]  # (layer, tensor) -> what-if level


@dataclass(slots=True)
class RecipeDecision:
    choice: RecipeChoice
    current: str
    changed: bool
    capability: float | None
    capability_source: str
    whatif: WhatIf | None = None  # evidence for the chosen recipe, when logged
    notes: list[str] = field(default_factory=list)
    current_source: str = ""  # how the current recipe was known
    trained: str = ""  # what the run trained in: its recipe, or "bf16" (`current` is then TE's default for the GPU)
    evidence: str = ""  # what drove the choice: "what-if stats", "logged stats: ...", "previous run", or none
    apply_paths: dict[str, str] = field(default_factory=dict)  # apply path -> whether it works with the choice

    @property
    def trained_in(self) -> str:
        """The run's own training precision: its recipe, or "bf16" for a run that trained in high precision."""
        return self.trained or self.current

    @property
    def switches(self) -> bool:
        """Does the recommended recipe change what the run trained in (always, for a BF16 run)?"""
        return self.choice.name != self.trained_in

    def level_fn(self) -> LevelFn | None:
        """Levels under the chosen recipe (what-if where logged, today's level elsewhere), or None."""
        if self.whatif is None:
            return None
        table = self.whatif.levels
        return lambda lv, tensor: table.get((lv.name, tensor), lv.tensors[tensor].level)

    def bands(self, analysis: Analysis) -> Bands | None:
        """The bands `level_fn`'s levels are judged with: a what-if level with the band of the recipe it measures
        (an FP8 recipe: FP8's, `requested_thresholds`), a tensor without one (today's level) with the training
        recipe's (NVFP4's under NVFP4 training); None without what-if levels."""
        if self.whatif is None:
            return None
        table, fp8, own = self.whatif.levels, analysis.requested_thresholds.critical, analysis.thresholds.critical
        prefix, name = STAT_PREFIX[self.whatif.recipe], SHORT[self.whatif.recipe]
        text = f"{prefix}_ what-if levels judged with {name}'s FP8 band (critical {fp8:g}%)"
        missing = [(lv.name, t) for lv in analysis.layout.fp8() for t in lv.tensors if (lv.name, t) not in table]
        if missing and own != fp8:
            text += (
                f"; {len(missing)} tensor(s) without a {prefix}_ what-if keep their {SHORT[self.current]} level and "
                f"band (critical {own:g}%)"
            )
        return Bands(lambda lv, tensor: fp8 if (lv.name, tensor) in table else own, fp8, text)


def resolve_capability(gpu_arch: str | GpuSpec | None, analysis: Analysis) -> tuple[float | None, str]:
    """(capability, where it came from); an unrecognised GPU is said so and the next source is used."""
    gpu = (
        gpu_arch
        if isinstance(gpu_arch, GpuSpec) or gpu_arch is None
        else GpuSpec(gpu_arch, "gpu_arch", compute_capability(gpu_arch))
    )
    if gpu is not None and gpu.capability is not None:
        return gpu.capability, gpu.describe()
    unknown = f"{gpu.describe()}; " if gpu is not None else ""
    cap, source = _capability_from_stats(analysis)
    return cap, unknown + source


def _capability_from_stats(analysis: Analysis) -> tuple[float | None, str]:
    if analysis.training.recipe in ("nvfp4", "mxfp8"):
        return 10.0, (
            f"inferred: the run trained with {analysis.training.recipe.upper()}, which TE runs on compute "
            "capability >= 10 (Blackwell)"
        )
    recipes = {m.recipe for m in analysis.signals.summaries}
    if "mxfp8" in recipes:
        return 10.0, "inferred from logged mxfp8_* what-if stats (TE computes them on compute capability >= 10)"
    if "fp8_block_scaling" in recipes:
        return 9.0, "inferred from logged fp8_block_scaling_* what-if stats (compute capability >= 9)"
    return None, f"unknown GPU: assumed Hopper (compute capability {ASSUMED_CAPABILITY:g})"


def resolve_current(option: str | None, analysis: Analysis, capability: float | None = None) -> tuple[str, str]:
    """The recipe the run trained with: the request/metadata, else the stats (formats.py), else TE's default for
    the GPU (`capability`; None: unknown, Hopper assumed) — stated as an assumption."""
    if option:
        return option, "from the request/metadata"
    if analysis.training.high_precision:  # a BF16 run: the what-ifs are judged against TE's default for the GPU
        recipe, _ = te_default_recipe(capability)
        return recipe, (
            f"{analysis.training.source}; its what-ifs are compared with TE's default "
            f"for {_gpu_text(capability)}, {RECIPE_LABELS[recipe]} (get_default_fp8_recipe)"
        )
    if analysis.training.recipe is not None:
        return analysis.training.recipe, analysis.training.source
    overflow = any(m.stat == "overflows%" and m.recipe is None for m in analysis.signals.summaries)
    if overflow:
        return "delayed", "inferred: bare overflows% is only logged under delayed scaling"
    recipe, source = te_default_recipe(capability)
    whatifs = {PREFIX_RECIPE[m.recipe] for m in analysis.signals.summaries if m.recipe in PREFIX_RECIPE}
    if recipe in whatifs:  # TE logs a what-if next to the run's own stats only for another recipe
        return "delayed", (
            f"unknown: not TE's default {RECIPE_LABELS[recipe]} for this GPU ({STAT_PREFIX[recipe]}_* what-ifs are "
            "logged next to the run's own stats); DelayedScaling assumed"
        )
    return recipe, source


def te_default_recipe(capability: float | None) -> tuple[str, str]:
    """TE's `get_default_fp8_recipe` (transformer_engine/pytorch/quantization.py) for a GPU: MXFP8BlockScaling where
    MXFP8 is supported (10.0 <= cc < 12.0), Float8CurrentScaling on cc >= 12.0, else DelayedScaling."""
    cap = capability if capability is not None else ASSUMED_CAPABILITY
    gpu = _gpu_text(capability)
    if supported("mxfp8", cap):
        recipe = "mxfp8"
    elif cap >= 12.0:
        recipe = "current"
    else:
        recipe = "delayed"
    return recipe, f"unknown: assumed TE's default for {gpu}, {RECIPE_LABELS[recipe]} (get_default_fp8_recipe)"


def _gpu_text(capability: float | None) -> str:
    cap = capability if capability is not None else ASSUMED_CAPABILITY
    return f"compute capability {cap:g}" + ("" if capability is not None else " (GPU unknown, Hopper assumed)")


def whatif_summaries(analysis: Analysis) -> dict[str, WhatIf]:
    """Per FP8 what-if recipe: how it compares with today (under NVFP4 training, today's levels are judged with
    NVFP4's bands and the what-if's with FP8's: `requested_thresholds`)."""
    layout, signals, th = analysis.layout, analysis.signals, analysis.thresholds
    fp8_critical = analysis.requested_thresholds.critical
    out: dict[str, WhatIf] = {}
    for prefix, recipe in PREFIX_RECIPE.items():
        levels = {
            (lv.name, t): s.level
            for lv in layout.fp8()
            for t in lv.tensors
            if (s := signals.worst(lv.name, t, recipe=prefix)) is not None
        }
        if levels:
            out[recipe] = _compare(recipe, levels, layout.fp8(), th.warning, th.critical, fp8_critical)
    return out


def _compare(
    recipe: str,
    levels: dict[tuple[str, str], float],
    fp8: list[LayerLevels],
    warning: float,
    critical: float,
    whatif_critical: float,
) -> WhatIf:
    """Today's levels against the training format's bands, the what-if's against its own (FP8) critical band;
    ratios in units of each one's critical band (the same as raw ratios when both are FP8)."""
    now = {(lv.name, t): s.level for lv in fp8 for t, s in lv.tensors.items() if (lv.name, t) in levels}
    relevant = [k for k, v in now.items() if v >= warning] or list(now)
    scale = critical / whatif_critical
    ratios = [levels[k] * scale / now[k] if now[k] > 0 else (0.0 if levels[k] == 0 else np.inf) for k in relevant]
    return WhatIf(
        recipe,
        len(now),
        sum(v >= critical for v in now.values()),
        sum(levels[k] >= whatif_critical for k in now),
        float(np.median(ratios)) if ratios else np.inf,
        levels,
    )


def choose_recipe(
    analysis: Analysis, plan: SkipPlan, *, current: str, gpu_arch: str | GpuSpec | None, current_source: str = ""
) -> RecipeDecision:
    decision = _choose(analysis, plan, current, gpu_arch)
    decision.current_source = current_source
    decision.trained = "bf16" if analysis.training.high_precision else current
    if analysis.training.high_precision and not decision.changed:  # no "keep": the run trained in BF16
        reason = (
            f"the run trained in BF16; {current} (TE's default for this GPU) is proposed: no what-if favours "
            "another recipe (the what-if verdict per layer is in the precision ladder's evidence)."
        )
        decision.choice = replace(decision.choice, reason=reason)
        decision.evidence = "none: the run trained in BF16 (what-if stats only); TE's default for the GPU"
    return decision


def _choose(analysis: Analysis, plan: SkipPlan, current: str, gpu_arch: str | GpuSpec | None) -> RecipeDecision:
    cap, cap_source = resolve_capability(gpu_arch, analysis)
    usable = cap if cap is not None else ASSUMED_CAPABILITY
    allowed = [r for r in FP8_RECIPES if supported(r, usable)]
    notes = [] if allowed else [f"compute capability {usable} cannot run FP8 (needs >= 8.9); recipe left as is."]
    whatifs = whatif_summaries(analysis)
    pick = _best_whatif(whatifs, allowed, current, analysis.thresholds.whatif_gain)
    if pick is not None:
        w = whatifs[pick]
        reason = (
            f"what-if {STAT_PREFIX[pick]}_underflows% leaves {w.failing_after} of {w.tensors} tensors at or "
            f"above {analysis.requested_thresholds.critical:g}% (now {w.failing_now}"
            + (
                f" at or above NVFP4's {analysis.thresholds.critical:g}%"
                if analysis.thresholds.critical != analysis.requested_thresholds.critical
                else ""
            )
            + f"), median ratio {w.median_ratio:.2f} "
            f"of today's level"
        )
        return _decision(pick, current, cap, cap_source, reason, analysis, plan, w, notes, "what-if stats")
    if analysis.by_pattern(Pattern.UNIFORM) and allowed:
        finest = max(allowed, key=GRANULARITY.__getitem__)
        target = finest if GRANULARITY[finest] > GRANULARITY[current] else current
        reason = (
            f"most layers fail ({analysis.by_pattern(Pattern.UNIFORM)[0].summary}) → finer-grained "
            f"scaling ({target}) instead of a skip list"
            if target != current
            else "most layers fail but no finer-grained recipe runs on this GPU"
        )
        evidence = "logged stats: uniform pattern" + ("" if target == current else " (most layers fail)")
        return _decision(target, current, cap, cap_source, reason, analysis, plan, whatifs.get(target), notes, evidence)
    return _decision(current, current, cap, cap_source, "", analysis, plan, None, notes, "")


def prefer_finer(decision: RecipeDecision, analysis: Analysis, plan: SkipPlan, reason: str) -> RecipeDecision:
    """The finest-grained recipe the GPU runs when it is finer than `decision`'s (history rule: a recipe change
    instead of a wider BF16 edge); `decision` unchanged otherwise."""
    usable = decision.capability if decision.capability is not None else ASSUMED_CAPABILITY
    allowed = [r for r in FP8_RECIPES if supported(r, usable)]
    if not allowed:
        return decision
    finest = max(allowed, key=GRANULARITY.__getitem__)
    if GRANULARITY[finest] <= GRANULARITY[decision.choice.name]:
        return decision
    whatif = whatif_summaries(analysis).get(finest)
    new = _decision(
        finest,
        decision.current,
        decision.capability,
        decision.capability_source,
        reason,
        analysis,
        plan,
        whatif,
        list(decision.notes),
        "previous run: the problem followed a moved BF16 boundary",
    )
    new.current_source, new.trained = decision.current_source, decision.trained
    return new


def _best_whatif(whatifs: dict[str, WhatIf], allowed: list[str], current: str, gain: float) -> str | None:
    # delayed is never a what-if target: TE cannot compute it under another recipe, and it forbids BF16 layers
    good = [
        w
        for r, w in whatifs.items()
        if r in allowed and r not in (current, "delayed") and w.failing_after < w.failing_now and w.median_ratio <= gain
    ]
    if not good:
        return None
    return min(good, key=lambda w: (w.failing_after, w.median_ratio, -SPEED_RANK[w.recipe])).recipe


def _body_layers(analysis: Analysis, names: tuple[str, ...]) -> list[str]:
    levels = analysis.layout.levels
    return [name for name in names if name in levels and levels[name].block is not None]


def _decision(
    target: str,
    current: str,
    cap: float | None,
    cap_source: str,
    reason: str,
    analysis: Analysis,
    plan: SkipPlan,
    whatif: WhatIf | None,
    notes: list[str],
    evidence: str,
) -> RecipeDecision:
    reasons = [reason] if reason else []
    if current == "delayed":
        delayed_issues = [p.value for p in (Pattern.OVERFLOW, Pattern.SCALE_INSTABILITY) if analysis.by_pattern(p)]
        if delayed_issues:
            reasons.append(f"{' and '.join(delayed_issues)} under delayed scaling → scales from each step's amax")
            if target == "delayed":
                target = "current"
                evidence = evidence or f"logged stats: {' and '.join(delayed_issues)} findings"
    paths = apply_paths(analysis, plan, target)
    if target == current and not reasons:
        reasons.append(
            f"keep {current}: no logged stat or what-if favours another recipe (no overflow, no scale "
            "instability, no what-if recipe clearly better)"
        )
        if "megatron" in paths and current == "delayed":  # other recipes take Megatron's first/last BF16 flags
            reasons.append(
                "the BF16 layers and GEMM overrides apply with it through the TE debug YAML (DisableFP8Layer / "
                "DisableFP8GEMM); only Megatron's --first-last-layers-bf16 path needs tensorwise (current) scaling"
            )
    choice = RecipeChoice(target, RECIPE_CLASSES[target], dict(KWARGS[target]), "; ".join(reasons) + ".")
    return RecipeDecision(
        choice,
        current,
        target != current,
        cap,
        cap_source,
        whatif if whatif is not None and whatif.recipe == target else None,
        notes,
        evidence=evidence if target != current else (evidence or "none: recipe kept"),
        apply_paths=paths,
    )


def apply_paths(analysis: Analysis, plan: SkipPlan, recipe: str) -> dict[str, str]:
    """Which apply paths keep the plan's BF16 layers with `recipe` (empty when no block layer is in BF16)."""
    bf16 = _body_layers(analysis, plan.bf16_layers)
    overridden = [n for n in _body_layers(analysis, tuple(o.layer for o in plan.overrides)) if n not in bf16]
    if not (bf16 or overridden):
        return {}
    paths = {
        "te-yaml": "works: the TE debug API's DisableFP8Layer / DisableFP8GEMM keep these layers / GEMMs in BF16 "
        f"under {recipe} scaling",
    }
    if recipe == "delayed":
        paths["megatron"] = (
            f"needs tensorwise (current) scaling: Megatron raises 'Delayed scaling does not support first / last "
            f"layer in BF16' ({len(bf16)} block layer(s) in BF16, {len(overridden)} with GEMM overrides run as "
            "whole BF16 modules there)"
        )
    else:
        paths["megatron"] = f"works with {recipe} scaling"
    return paths
