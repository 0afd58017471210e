"""The per-layer precision ladder: for each layer the cheapest precision it tolerates, with evidence and confidence.

Belongs here: reading each rung's evidence from an analysis (training stats, what-ifs, the block-16 dynamic range),
the rung rules below and the JSON `precision_ladder`. Must not be here: skip plans, recipe choice, rendering.

Rungs (records.PRECISIONS): nvfp4, then FP8 (mxfp8, block, current, delayed), then bf16. Only rungs the GPU runs
(analysis/recipes.py `supported`) are considered. Per layer:
1. NVFP4 needs NVFP4 evidence, never an assumption: `nvfp4_underflows%` from NVFP4 training or from an `nvfp4_`
   what-if (the CPU collector writes them; TE refuses that prefix), judged with NVFP4's bands (1-D for activation
   and gradient, 16x16 for weight; analysis/formats.py) and against the layer's peers (same tensor and sublayer
   kind: a level in the warning band at least `NVFP4_PEER_RATIO` times the peers' median fails); or, without those,
   TE LogTensorStats' `max_blockwise_dynamic_range_block_size_16` on all three tensors at most
   `PROXY_MAX_BINADES` (log2(6 / (1 + 2^-4) / 0.25): no element of any 16-element block can round to zero even
   with the E4M3 block scale rounded; it cannot see blocks far below the tensor's amax), at confidence x0.5.
   A layer the FP8 plan skips or overrides does not go NVFP4; a layer with GEMM overrides stays at the recommended
   FP8 recipe with those GEMMs in BF16 (its failing tensor is what the override takes out of FP8).
2. Otherwise the FP8 rung: the recommended recipe first when it is FP8 (no needless mix), then the others finest
   first (mxfp8, block, current; delayed only as the recommended recipe: Megatron's precision config refuses it
   and it forbids BF16 layers). A rung fits when every logged tensor's `underflows%` level (training stats for the
   training recipe, the `<prefix>_` what-if otherwise) is below the FP8 critical band. Without its own stats a rung
   is inferred, said so, at lower confidence: MXFP8 from a fitting block or per-tensor rung (32-element E8M0 blocks
   are finer; a power-of-two scale costs at most one binade) x0.7; block from a per-tensor rung x0.7; current from
   delayed x0.8. A layer the plan skips stays BF16 (the skip list is what every output applies), except:
2b. The lift: a layer failing NVFP4 under an NVFP4 recipe (outer or training) goes to its FP8 rung instead of BF16
   when MXFP8 runs on the GPU, no finding says its failure is more than underflow (NaN/inf, rising trend,
   overflow, scale instability, unassessed stats: `lift_blockers`) and no FP8 rung's own stats fail: the first FP8
   rung whose own stats fit, else MXFP8 inferred at x0.6 (block-scaled formats do not overflow, and E4M3 keeps
   about 17.8 binades under each 32-block's E8M0 scale against E2M1's 3.6 under a 16-block's E4M3 scale; an
   mxfp8_ what-if confirms it). A lifted layer the plan skipped leaves `fp8_skip_layers` (recommend() re-plans
   with `lifted`), so the ladder and every rendered output tell one verdict. Not lifted: a skipped layer stays
   BF16, one the plan left alone stays at the outer recipe (below critical), each saying why.
3. Else BF16 (and every layer the run already ran in BF16, or skipped with no rung left).
A mixed-format run's layers are read in the recipe each trained in (analysis/layer_formats.py): an MXFP8 layer of an
NVFP4 run has FP8 training stats, so it needs NVFP4 evidence of its own (what-if, proxy) to go NVFP4.
Confidence: 1, x0.8 per quantized tensor without stats, x the rule's factor, x0.6 with fewer post-warm-up points
than `min_points`. Layers with no stats at all (fp8_unobserved) are not in the ladder: they keep the outer recipe.
"""

from __future__ import annotations

import math

import numpy as np

from fp8_policy.policy.analysis.formats import NVFP4_PEER_RATIO, NVFP4_WEIGHT_BANDS
from fp8_policy.policy.analysis.layout import LayerLevels, LayerStatus
from fp8_policy.policy.analysis.recipes import STAT_PREFIX, supported
from fp8_policy.policy.analysis.result import Analysis
from fp8_policy.policy.recommend.gpu import ASSUMED_CAPABILITY
from fp8_policy.policy.recommend.ladder_evidence import (
    Verdict,
    dynamic_ranges,
    lift_blockers,
    training_nvfp4_weights,
    unobserved_own_rungs,
)
from fp8_policy.policy.recommend.ladder_record import FP8_FINEST_FIRST
from fp8_policy.policy.recommend.ladder_record import Ladder as Ladder  # re-exported
from fp8_policy.policy.recommend.ladder_sensitivity import with_sensitivity
from fp8_policy.policy.recommend.skiplist import SkipPlan
from fp8_policy.policy.records import PRECISIONS, QUANTIZED_TENSORS, LayerPrecision, RunData
from fp8_policy.policy.sensitivity import SensitivityJudge

PROXY_MAX_BINADES = math.log2(6.0 / (1.0 + 2.0**-4) / 0.25)  # 4.497
_INFER: dict[str, tuple[tuple[str, ...], float]] = {  # rung -> (rungs it may be inferred from, confidence factor)
    "mxfp8": (("block", "current", "delayed"), 0.7),
    "block": (("current", "delayed"), 0.7),
    "current": (("delayed",), 0.8),
}
LIFT_FACTOR = 0.6


def build_ladder(
    run: RunData,
    analysis: Analysis,
    plan: SkipPlan,
    outer: str,
    training: str,
    capability: float | None,
    sensitivity: SensitivityJudge | None = None,
) -> Ladder:
    """The ladder for the run's layers (`outer`: the recommended recipe; `training`: the recipe the run used;
    `sensitivity`: the run's loss-sensitivity verdicts, which adjust each rung's verdict, ladder_sensitivity.py)."""
    cap = capability if capability is not None else ASSUMED_CAPABILITY
    ctx = _Context(run, analysis, plan, outer, training, cap)
    ctx.sensitivity = sensitivity
    rungs = [ctx.rung(lv) for lv in analysis.layout.levels.values() if lv.status in (LayerStatus.FP8, LayerStatus.BF16)]
    rungs += unobserved_own_rungs(analysis, outer)
    return Ladder(tuple(rungs), tuple(ctx.assumptions(capability)))


class _Context:
    def __init__(self, run: RunData, analysis: Analysis, plan: SkipPlan, outer: str, training: str, cap: float) -> None:
        self.run, self.analysis, self.plan = run, analysis, plan
        self.outer, self.training, self.cap = outer, training, cap
        self.fp8 = analysis.requested_thresholds
        self.skipped = set(plan.skip_layers) | set(plan.kept_bf16)
        self.overridden = {o.layer for o in plan.overrides}
        self.own = analysis.training.layer_recipes  # a mixed-format run: layers trained in another recipe
        fp4 = training == "nvfp4" or "nvfp4" in self.own.values()
        self.nvfp4_weights = training_nvfp4_weights(run, analysis) if fp4 else {}
        self.dynamic_range = dynamic_ranges(run, analysis)
        self._nvfp4_levels: dict[str, dict[str, float]] = {}
        self.few_points = float(analysis.stats.get("median_points_per_series", 0.0)) < self.fp8.min_points
        self.lift_blockers = lift_blockers(analysis)
        self.sensitivity: SensitivityJudge | None = None

    # --- levels ------------------------------------------------------------------------------------------------

    def trained(self, lv: LayerLevels) -> str:
        """The recipe this layer trained in: its own (a mixed-format run, analysis/layer_formats.py) or the run's."""
        return self.own.get(lv.name, self.training)

    def levels(self, lv: LayerLevels, precision: str) -> dict[str, float]:
        """tensor -> level of `precision`'s underflows% for this layer (training stats or its what-if)."""
        if precision == self.trained(lv):
            out = {t: s.level for t, s in lv.tensors.items()}
            if precision == "nvfp4" and lv.name in self.nvfp4_weights:
                out["weight"] = self.nvfp4_weights[lv.name]
            return out
        prefix = STAT_PREFIX[precision]
        signals = self.analysis.signals
        return {t: s.level for t in QUANTIZED_TENSORS if (s := signals.worst(lv.name, t, recipe=prefix)) is not None}

    def peers_median(self, lv: LayerLevels, tensor: str) -> float | None:
        sub = lv.info.structure.sublayer
        values = [
            levels[tensor]
            for other in self.analysis.layout.levels.values()
            if other is not lv and other.info.structure.sublayer == sub and other.status is LayerStatus.FP8
            if tensor in (levels := self._nvfp4(other))
        ]
        return float(np.median(values)) if len(values) >= 3 else None

    def _nvfp4(self, lv: LayerLevels) -> dict[str, float]:
        if lv.name not in self._nvfp4_levels:
            self._nvfp4_levels[lv.name] = self.levels(lv, "nvfp4")
        return self._nvfp4_levels[lv.name]

    # --- verdicts ----------------------------------------------------------------------------------------------

    def nvfp4(self, lv: LayerLevels) -> Verdict:
        blocker = self.lift_blockers.get(lv.name)
        return with_sensitivity(self._nvfp4_underflow(lv), self.sensitivity, lv.name, "nvfp4", blocker)

    def _nvfp4_underflow(self, lv: LayerLevels) -> Verdict:
        levels = self._nvfp4(lv)
        source = "training stats" if self.trained(lv) == "nvfp4" else "nvfp4_ what-if"
        if not levels:
            return self._proxy(lv)
        failing, shown = [], []
        for tensor, level in levels.items():
            warning, critical, _ = self._nvfp4_bands(tensor)
            peers = self.peers_median(lv, tensor)
            peer_text = f", peers' median {peers:.2f}%" if peers is not None else ""
            shown.append(f"{tensor} {level:.2f}%{peer_text}")
            if level >= critical:
                failing.append(f"{tensor} {level:.2f}% >= {critical:g}% critical")
            elif peers is not None and level >= warning and level >= NVFP4_PEER_RATIO * peers:
                failing.append(f"{tensor} {level:.2f}% >= {NVFP4_PEER_RATIO:g}x its peers' median {peers:.2f}%")
        if failing:
            return Verdict(False, f"NVFP4 fails ({source}): {'; '.join(failing)}.", len(levels))
        bands = f"{self.fp8.nvfp4_critical:g}% (1-D), {NVFP4_WEIGHT_BANDS[1]:g}% (16x16 weights)"
        return Verdict(
            True, f"NVFP4 fits ({source}): nvfp4_underflows% {', '.join(shown)}; below critical {bands}.", len(levels)
        )

    def _nvfp4_bands(self, tensor: str) -> tuple[float, float, float]:
        if tensor == "weight":
            return NVFP4_WEIGHT_BANDS
        return self.fp8.nvfp4_warning, self.fp8.nvfp4_critical, self.fp8.nvfp4_severe

    def _proxy(self, lv: LayerLevels) -> Verdict:
        ranges = self.dynamic_range.get(lv.name, {})
        if not ranges:
            return Verdict(None, "NVFP4 not assessed: no nvfp4_* stats and no blockwise dynamic range at block 16.")
        widest = max(ranges.values())
        text = ", ".join(f"{t} {v:.2f}" for t, v in ranges.items())
        if len(ranges) == len(QUANTIZED_TENSORS) and widest <= PROXY_MAX_BINADES:
            return Verdict(
                True,
                f"NVFP4 fits by proxy (no nvfp4_* stats): max blockwise dynamic range at block size 16 {text} "
                f"binades <= {PROXY_MAX_BINADES:.3f}, so no element rounds to zero inside its block (blocks far "
                "below the tensor's amax are not seen).",
                len(ranges),
                0.5,
            )
        return Verdict(
            None,
            f"NVFP4 not assessed: no nvfp4_* stats; max blockwise dynamic range at block size 16 {text} binades "
            f"(E2M1 holds {PROXY_MAX_BINADES:.3f} without underflow{'' if len(ranges) == 3 else ', not all tensors'}"
            "); log nvfp4_ what-ifs (CPU collector) to assess it.",
        )

    def fp8_rung(self, lv: LayerLevels, precision: str) -> Verdict:
        blocker = self.lift_blockers.get(lv.name)
        return with_sensitivity(self._fp8_underflow(lv, precision), self.sensitivity, lv.name, precision, blocker)

    def _fp8_underflow(self, lv: LayerLevels, precision: str) -> Verdict:
        levels = self.levels(lv, precision)
        source = "training stats" if precision == self.trained(lv) else f"{STAT_PREFIX[precision]}_ what-if"
        if not levels:
            return Verdict(None, f"{precision}: no stats.")
        critical = self.fp8.critical
        failing = [f"{t} {v:.2f}%" for t, v in levels.items() if v >= critical]
        shown = ", ".join(f"{t} {v:.2f}%" for t, v in levels.items())
        if failing:
            return Verdict(False, f"{precision} fails ({source}): {', '.join(failing)} >= {critical:g}%.", len(levels))
        return Verdict(True, f"{precision} fits ({source}): underflows% {shown} < {critical:g}%.", len(levels))

    # --- the rung ----------------------------------------------------------------------------------------------

    def rung(self, lv: LayerLevels) -> LayerPrecision:
        if lv.status is LayerStatus.BF16:
            return LayerPrecision(lv.name, "bf16", (self._ran_in_bf16(lv),), 1.0)
        evidence: list[str] = []
        skipped = lv.name in self.skipped
        nvfp4_failed, nvfp4_tensors = False, 0
        if supported("nvfp4", self.cap):
            verdict = self.nvfp4(lv)
            evidence.append(verdict.sentence)
            blocked = skipped or lv.name in self.overridden
            if verdict.fit and not blocked:
                return self._make(lv, "nvfp4", evidence, verdict)
            if verdict.fit and blocked:
                evidence.append("Not NVFP4: the plan keeps this layer (or some GEMMs) in BF16.")
            nvfp4_failed, nvfp4_tensors = verdict.fit is False, verdict.tensors
        override = next((o for o in self.plan.overrides if o.layer == lv.name), None)
        if override is not None and self.outer in self._fp8_order() + ["nvfp4"]:
            evidence.append(
                f"{self.outer} with {'+'.join(override.gemms)} kept in BF16 (gemm_overrides: {override.reason})."
            )
            return self._make(lv, self.outer, evidence, Verdict(True, "", len(lv.tensors)))
        if nvfp4_failed and "nvfp4" in (self.outer, self.trained(lv)):
            return self._lift(lv, evidence, nvfp4_tensors, skipped)
        if skipped:
            evidence += [v.sentence for p in self._fp8_order() if (v := self.fp8_rung(lv, p)).fit is not None]
            evidence.append("BF16: skipped by the recommendation (fp8_skip_layers).")
            evidence += [note for name, note in self.plan.sensitivity_notes if name == lv.name]
            return LayerPrecision(lv.name, "bf16", tuple(evidence), 1.0)
        verdicts: dict[str, Verdict] = {}
        for precision in self._fp8_order():
            verdicts[precision] = verdict = self.fp8_rung(lv, precision)
            if verdict.fit:
                evidence.append(verdict.sentence)
                return self._make(lv, precision, evidence, verdict)
            if verdict.fit is False:
                evidence.append(verdict.sentence)
        for precision in self._fp8_order():
            inferred = self._infer(lv, precision, verdicts)
            if inferred is not None:
                evidence.append(inferred.sentence)
                return self._make(lv, precision, evidence, inferred)
        evidence.append("BF16: no low-precision rung fits.")
        return LayerPrecision(lv.name, "bf16", tuple(evidence), 0.8)

    def _lift(self, lv: LayerLevels, evidence: list[str], nvfp4_tensors: int, skipped: bool) -> LayerPrecision:
        """A layer failing NVFP4 under an NVFP4 outer recipe (the lift rule, module docstring)."""
        stay = (
            "BF16: skipped by the recommendation (fp8_skip_layers), not lifted to FP8: {}."
            if skipped
            else f"{self.outer} kept: the plan leaves this layer at the outer recipe (below its critical band), and it "
            "is not lifted to FP8: {}; watch it."
        )
        blocker = self.lift_blockers.get(lv.name)
        order = self._fp8_order()
        if blocker is not None or "mxfp8" not in order:
            why = blocker or f"MXFP8 is not supported at compute capability {self.cap:g}"
            return self._stay(lv, evidence, stay.format(why), skipped)
        verdicts = {p: self.fp8_rung(lv, p) for p in order}
        evidence += [v.sentence for v in verdicts.values() if v.fit is not None]
        fitting = [p for p in order if verdicts[p].fit]
        if fitting:
            evidence.append(f"Lifted to {fitting[0]} instead of BF16: its own stats fit.")
            return self._make(lv, fitting[0], evidence, verdicts[fitting[0]])
        failing = [p for p in order if verdicts[p].fit is False]
        if failing:
            return self._stay(lv, evidence, stay.format(f"{', '.join(failing)} fails on its own stats"), skipped)
        evidence.append(
            "mxfp8 inferred (no mxfp8_ stats; lift confidence x0.6): its NVFP4 failure is underflow only, and MXFP8's "
            "E4M3 elements keep about 17.8 binades under each 32-element block's E8M0 scale against E2M1's 3.6 under "
            "a 16-element block's E4M3 scale, so it is lifted to MXFP8 instead of BF16. Confirm with an mxfp8_ "
            "what-if (LogFp8TensorStats on this layer, or the CPU collector)."
        )
        return self._make(lv, "mxfp8", evidence, Verdict(True, "", nvfp4_tensors, LIFT_FACTOR))

    def _stay(self, lv: LayerLevels, evidence: list[str], sentence: str, skipped: bool) -> LayerPrecision:
        evidence.append(sentence)
        if skipped:
            return LayerPrecision(lv.name, "bf16", tuple(evidence), 1.0)
        return self._make(lv, self.outer, evidence, Verdict(True, "", len(lv.tensors), 0.5))

    def _ran_in_bf16(self, lv: LayerLevels) -> str:
        """A layer that ran in BF16 keeps BF16 in every output (the JSON's BF16 set), so its rung does too; its
        nvfp4_ what-if (the CPU collector logs them for BF16 layers) is reported, not offered."""
        recipe = None if self.training == "nvfp4" else STAT_PREFIX["nvfp4"]
        signals = self.analysis.signals
        levels = {t: s.level for t in QUANTIZED_TENSORS if (s := signals.worst(lv.name, t, recipe=recipe)) is not None}
        if not levels:
            return "Ran in BF16 in this run: no low-precision evidence."
        failing = [t for t, v in levels.items() if v >= self._nvfp4_bands(t)[1]]
        shown = ", ".join(f"{t} {v:.2f}%" for t, v in levels.items())
        verdict = f"fails on {', '.join(failing)}" if failing else "fits below NVFP4's critical bands"
        return (
            f"Ran in BF16 in this run; its nvfp4_ what-if ({shown}) {verdict}. Not offered as a rung: every output "
            "keeps layers that ran in BF16 in BF16; enable low precision on it in the model and log "
            "nvfp4_underflows% to move it."
        )

    def _fp8_order(self) -> list[str]:
        order = [self.outer] if self.outer in FP8_FINEST_FIRST + ("delayed",) else []
        order += [p for p in FP8_FINEST_FIRST if p not in order]
        return [p for p in order if supported(p, self.cap)]

    def _infer(self, lv: LayerLevels, precision: str, verdicts: dict[str, Verdict]) -> Verdict | None:
        """A rung without its own stats, inferred from a coarser rung that fits (module docstring)."""
        if verdicts.get(precision, Verdict(None, "")).fit is not None or precision not in _INFER:
            return None
        sources, factor = _INFER[precision]
        fits = [p for p in sources if p in verdicts and verdicts[p].fit]
        if not fits:
            fits = [p for p in sources if p not in verdicts and self.fp8_rung(lv, p).fit]
        if not fits:
            return None
        return Verdict(
            True,
            f"{precision} assumed (no {STAT_PREFIX[precision]}_ stats): {fits[0]} fits and {precision}'s scaling "
            "is finer-grained.",
            len(self.levels(lv, fits[0])),
            factor,
        )

    def _make(self, lv: LayerLevels, precision: str, evidence: list[str], verdict: Verdict) -> LayerPrecision:
        confidence = verdict.factor * 0.8 ** max(0, len(QUANTIZED_TENSORS) - verdict.tensors)
        if self.few_points:
            confidence *= 0.6
            evidence.append(f"Few post-warm-up points per series (< {self.fp8.min_points}).")
        return LayerPrecision(lv.name, precision, tuple(evidence), round(max(0.05, confidence), 2))

    def assumptions(self, capability: float | None) -> list[str]:
        left_out = [p for p in PRECISIONS[:-1] if not supported(p, self.cap)]
        gpu = f"compute capability {self.cap:g}" + (" (GPU unknown: Hopper assumed)" if capability is None else "")
        out = [
            "NVFP4 only with NVFP4 evidence: nvfp4_underflows% (training or nvfp4_ what-if) below NVFP4's "
            "critical bands and not twice its peers' median, or the block-16 dynamic-range proxy "
            f"(<= {PROXY_MAX_BINADES:.3f} binades on all three tensors).",
            f"FP8 rungs fit below {self.fp8.critical:g}% underflows%; a rung without its own stats is inferred "
            "only from a coarser rung that fits, or for a layer failing NVFP4 by underflow only (lifted to MXFP8 "
            f"instead of BF16, x{LIFT_FACTOR:g}; an mxfp8_ what-if confirms it); stated per layer, lower confidence.",
            f"Rungs for {gpu}" + (f"; left out: {', '.join(left_out)}." if left_out else "."),
        ]
        if self.analysis.training.source.startswith("assumed"):  # formats.py: a recipe no metadata gives
            out.append(f"Training recipe {self.analysis.training.source}.")
        unobserved = [lv.name for lv in self.analysis.layout.levels.values() if lv.status is LayerStatus.UNOBSERVED]
        if unobserved:
            out.append(f"{len(unobserved)} layer(s) without stats are not in the ladder and keep the outer recipe.")
        if self.plan.overrides:
            out.append("Layers with GEMM overrides keep those GEMMs in BF16 at their rung (gemm_overrides).")
        if self.outer == "delayed" and supported("nvfp4", self.cap):
            out.append(
                "The outer recipe is delayed scaling: layers at another rung run under their own te.autocast, where "
                "delayed scaling's amax reduction does not reach them; current scaling as the outer recipe avoids it."
            )
        return out


def lifted_layers(ladder: Ladder, plan: SkipPlan) -> frozenset[str]:
    """Layers the plan skips whole that the ladder lifts to an FP8 rung (they leave `fp8_skip_layers`)."""
    skipped = set(plan.failing_skips)
    return frozenset(r.layer for r in ladder.rungs if r.layer in skipped and r.precision != "bf16")
