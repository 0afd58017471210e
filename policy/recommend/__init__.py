"""Precision-policy recommendation: `recommend(run, analysis, options) -> Recommendation` and its JSON shape.

Input contract: a `RunData` and (optionally) its `Analysis`; no I/O, no web or database imports.
Flow: skip plan under today's levels → recipe choice (what-if, uniform, delayed-scaling rules) → final plan under
the chosen recipe (what-if levels when logged; deferred for `uniform` without them) → Megatron section, expected
cost, confidence and rationale → the per-layer precision ladder (ladder.py) with its FP4/FP8/BF16 cost.
`POLICY_VERSION` (policy/policy_version.py) changes whenever a rule changes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Any

from fp8_policy.policy.analysis import analyze
from fp8_policy.policy.analysis.config_bf16 import with_config_bf16
from fp8_policy.policy.analysis.findings import Finding, LayerAssessment, Pattern
from fp8_policy.policy.analysis.layout import LayerStatus
from fp8_policy.policy.analysis.recipes import RECIPE_LABELS, normalize_recipe
from fp8_policy.policy.analysis.result import Analysis
from fp8_policy.policy.policy_version import POLICY_VERSION as POLICY_VERSION  # re-exported; bump it there
from fp8_policy.policy.recommend.confidence import confidence
from fp8_policy.policy.recommend.cost import answer_cost, ladder_view
from fp8_policy.policy.recommend.frontier import Frontier, build_frontier
from fp8_policy.policy.recommend.gpu import ASSUMED_CAPABILITY
from fp8_policy.policy.recommend.headline import decision_headline
from fp8_policy.policy.recommend.history import History, HistoryEffect, history_effect
from fp8_policy.policy.recommend.ladder import Ladder, build_ladder, lifted_layers
from fp8_policy.policy.recommend.ladder_evidence import lift_blockers
from fp8_policy.policy.recommend.megatron import megatron_section
from fp8_policy.policy.recommend.options import ModelDims, RecommendOptions
from fp8_policy.policy.recommend.rationale import build_rationale
from fp8_policy.policy.recommend.recipe import (
    RecipeDecision,
    choose_recipe,
    prefer_finer,
    resolve_capability,
    resolve_current,
)
from fp8_policy.policy.recommend.runs_at import applied_rungs, counted_rungs
from fp8_policy.policy.recommend.schedule import Phase, build_schedule
from fp8_policy.policy.recommend.sensitive_plan import SensitivePlan
from fp8_policy.policy.recommend.skiplist import SkipPlan, plan_skips
from fp8_policy.policy.recommend.target import RetargetContext, compact_layout
from fp8_policy.policy.records import QUANT_STATS, PolicyDecision, RunData
from fp8_policy.policy.render import applied_by_format, megatron_pipeline, pipeline
from fp8_policy.policy.render.megatron import staged_globs
from fp8_policy.policy.render.precision import kept_bf16
from fp8_policy.policy.sensitivity import SensitivityJudge, read_sensitivity
from fp8_policy.policy.thresholds import Thresholds

# Run-metadata keys saying the run keeps FP8/FP4 parameters (TE `quantized_model_init`; Megatron
# `--fp8-param-gather` is `fp8_param_gather` in its arguments): no high-precision weight exists to take stats of.
FP8_PARAM_KEYS: tuple[str, ...] = ("fp8_param", "fp8_param_gather", "fp4_param", "fp4_param_gather")

__all__ = ["POLICY_VERSION", "History", "ModelDims", "RecommendOptions", "Recommendation", "recommend"]


@dataclass(frozen=True, slots=True)
class Recommendation:
    decision: PolicyDecision
    megatron: dict[str, Any]
    expected_cost: dict[str, Any]
    rationale: list[str]
    confidence: float
    policy_version: str = POLICY_VERSION
    findings: list[Finding] = field(default_factory=list)
    history: HistoryEffect | None = None  # set when the previous run was given
    ladder: Ladder | None = None  # the per-layer precision ladder
    ladder_cost: dict[str, Any] | None = None  # its FP4 / FP8 / BF16 GEMM shares and speedup
    recipe_basis: dict[str, Any] = field(default_factory=dict)  # evidence, current, changed_from, apply_paths
    # the per-layer verdicts of the analysis it was built on, with its thresholds and stat prefix, so views (the
    # heatmap's boxes) reuse them instead of analysing again; small records, no series arrays (it is cached)
    layer_rows: tuple[LayerAssessment, ...] = field(default=(), repr=False)
    thresholds: Thresholds | None = None
    stat_prefix: str | None = None
    # precision that changes over the run: phases, each a whole policy from a step on (schedule.py); () when none
    schedule: tuple[Phase, ...] = ()
    headline: dict[str, Any] = field(default_factory=dict)  # recommend/headline.py: what the views read
    frontier: Frontier | None = field(default=None, repr=False)  # speed/risk frontier (recommend/frontier.py)
    context: RetargetContext | None = field(default=None, repr=False)  # what re-solving a target needs
    target: dict[str, Any] | None = None  # set by recommend/target.py `retarget`

    def to_dict(self) -> dict[str, Any]:
        recipe = self.decision.recipe
        extra: dict[str, Any] = {}
        if self.frontier is not None:
            chosen = None
            if self.target is not None:
                keys = ("frontier_point", "speedup", "predicted_risk", "spec", "met")
                chosen = {"source": "target", **{k: self.target[k] for k in keys}}
            extra["frontier"] = self.frontier.to_dict(chosen)
        if self.target is not None:
            extra["target"] = self.target
        return {
            "headline": self.headline,
            "fp8_skip_layers": list(self.decision.skip_layers),
            "gemm_overrides": [
                {"layer": o.layer, "gemms": list(o.gemms), "reason": o.reason} for o in self.decision.gemm_overrides
            ],
            "kept_bf16": kept_bf16(self.decision),
            "precision_ladder": self.ladder.to_dict(self.ladder_cost) if self.ladder is not None else None,
            "fp8_param": self.decision.fp8_param,
            "recipe": {
                "name": recipe.name,
                "label": RECIPE_LABELS[recipe.name],
                "class": recipe.class_path,
                "kwargs": dict(recipe.kwargs),
                "reason": recipe.reason,
                **self.recipe_basis,
            },
            "megatron": self.megatron,
            "formats": applied_by_format(self.decision),
            "parallel": pipeline.policy_json(self.decision.parallel),
            "expected_cost": self.expected_cost,
            "rationale": list(self.rationale),
            "confidence": self.confidence,
            "policy_version": self.policy_version,
            "findings": [f.brief() for f in self.findings],
            "history": self.history.to_dict() if self.history is not None else None,
            "schedule": [phase.to_dict() for phase in self.schedule] or None,
            **extra,
        }


def recommend(
    run: RunData,
    analysis: Analysis | None = None,
    options: RecommendOptions | None = None,
    history: History | None = None,
) -> Recommendation:
    """Recommend skips, GEMM overrides and a recipe; re-analyzes when `analysis` is missing or used other
    thresholds (or when options add num_layers / the current recipe the analysis did not see). With `history`
    (the previous run's analysis), problems that followed a moved BF16 boundary are not answered with a wider
    BF16 edge (recommend/history.py)."""
    options = options or RecommendOptions.from_metadata(run.metadata)
    run = with_config_bf16(run)  # a Megatron precision config's BF16 layers ran in BF16 (analysis/config_bf16.py)
    view = _analysis_view(run, options)
    if analysis is None or analysis.requested_thresholds != options.thresholds or view is not run:
        analysis = analyze(view, options.thresholds)
    effect = history_effect(history, analysis)
    no_promote = effect.no_promote if effect is not None else frozenset()
    capability = resolve_capability(options.gpu or options.gpu_arch, analysis)[0]
    current, current_source = resolve_current(options.current_recipe, analysis, capability)
    judge = SensitivityJudge(read_sensitivity(run, analysis.signals.warmup_cut))
    blockers = lift_blockers(analysis) if judge else {}
    first = plan_skips(
        analysis,
        keep_existing_bf16=options.keep_existing_bf16,
        skip_projected=options.skip_projected,
        no_promote=no_promote,
        sensitive=SensitivePlan(judge, current, blockers) if judge else None,
    )
    decision = choose_recipe(
        analysis, first, current=current, gpu_arch=options.gpu or options.gpu_arch, current_source=current_source
    )
    if effect is not None and effect.moved:
        decision = prefer_finer(
            decision,
            analysis,
            first,
            f"the problem followed the BF16 boundary since run "
            f"{effect.previous_run}: a finer-grained recipe instead of a wider BF16 edge",
        )
    sensitive = SensitivePlan(judge, decision.choice.name, blockers) if judge else None
    plan = _final_plan(analysis, options, first, decision, no_promote, sensitive=sensitive)
    evidence = analysis.data if analysis.data is not None else run  # a parallel job's shards combined (analysis)
    ladder = build_ladder(evidence, analysis, plan, decision.choice.name, current, decision.capability, judge)
    lifted = lifted_layers(ladder, plan)
    if lifted:  # one verdict: a layer the ladder lifts to an FP8 rung leaves the skip list (ladder.py, lift rule)
        plan = _final_plan(analysis, options, first, decision, no_promote, lifted, sensitive)
        ladder = replace(
            build_ladder(evidence, analysis, plan, decision.choice.name, current, decision.capability, judge),
            lifted=plan.lifted,
        )
    layout = analysis.layout
    outer = decision.choice.name
    runs_at = applied_rungs(ladder.rungs, plan.bf16_layers, outer)
    cost = answer_cost(layout, runs_at, plan.overrides, outer, decision.trained_in, options.dims, decision.capability)
    conf = confidence(analysis, plan, decision)
    te_version = options.te_version or _text(run.metadata.get("te_version"))
    megatron = megatron_section(layout, plan, decision.choice, ladder.rungs, te_version)  # rungs, custom: config file
    cap = decision.capability if decision.capability is not None else ASSUMED_CAPABILITY
    frontier = build_frontier(
        layout,
        counted_rungs(layout, runs_at, outer),
        plan.overrides,
        float(cost.get("gemm_speedup_vs_all_bf16", 1.0)),
        judge.table,
        outer,
        cap,
        options.dims,
        current,
    )
    context = RetargetContext(
        compact_layout(layout), plan, options.dims, decision.capability, current, judge.table, decision.trained_in
    )
    policy = PolicyDecision(
        plan.skip_layers,
        plan.overrides,
        decision.choice,
        tuple(run.layers.values()),
        te_version,
        layer_precisions=ladder.rungs,
        fp8_param=fp8_param(run.metadata),
        parallel=run.parallel,
        weights_logged=weights_logged(run),
    )
    megatron = megatron_pipeline.annotate(megatron, policy, staged_globs(policy))  # a glob hits every stage
    rationale = build_rationale(analysis, plan, decision, cost, megatron, conf)
    unobserved = sum(1 for lv in layout.levels.values() if lv.status is LayerStatus.UNOBSERVED)
    tail = f" {unobserved} layer(s) without stats run at {outer}." if unobserved else ""
    rationale.insert(-1, ladder.summary(current) + tail)
    schedule = build_schedule(analysis, policy, options.lr_decay_start, run.lr_decay_from_scalars)
    if schedule:
        steps = "; ".join(f"from step {p.from_step}: {p.reason}" for p in schedule)
        rationale.insert(-1, f"Schedule ({len(schedule)} phases, each a restart with its own configuration): {steps}.")
    rationale += list(options.ignored)  # run-metadata dimensions left out (policy/model_bounds.py)
    if effect is not None:
        rationale += effect.advice() or [
            f"Compared with run {effect.previous_run}: no problem followed a moved BF16 boundary."
        ]
    basis = {
        "evidence": decision.evidence + (f"; the skip list uses the {plan.band}" if plan.band else ""),
        "current": decision.trained_in,  # "bf16": the run trained in high precision
        "changed_from": decision.trained_in if decision.switches else None,
        "apply_paths": dict(decision.apply_paths),
    }
    head = decision_headline(layout, runs_at, policy, ladder.lifted, cost)
    return Recommendation(
        policy,
        megatron,
        cost,
        rationale,
        conf[0],
        POLICY_VERSION,
        list(analysis.findings),
        effect,
        ladder,
        ladder_view(cost),
        basis,
        tuple(analysis.layers),
        analysis.requested_thresholds,
        analysis.signals.stat_prefix,
        schedule=schedule,
        headline=head,
        frontier=frontier,
        context=context,
    )


def fp8_param(metadata: dict[str, object]) -> bool:
    """Whether the run keeps FP8/FP4 parameters (any of FP8_PARAM_KEYS true: a bool, 1, or "true"/"yes"/"1")."""
    for key in FP8_PARAM_KEYS:
        value = metadata.get(key)
        if value is True or (isinstance(value, (int, float)) and not isinstance(value, bool) and value == 1):
            return True
        if isinstance(value, str) and value.strip().lower() in ("true", "yes", "1"):
            return True
    return False


def weights_logged(run: RunData) -> bool:
    """False when the run logged quantization stats of activations or gradients but of no weight at all (TE
    refuses weight underflows%/overflows%/mse with FP8 primary weights, so such a run cannot have logged them)."""
    quant = [s.metric.tensor for s in run.series if s.metric.stat in QUANT_STATS]
    return not quant or "weight" in quant


def _final_plan(
    analysis: Analysis,
    options: RecommendOptions,
    first: SkipPlan,
    decision: RecipeDecision,
    no_promote: frozenset[str] = frozenset(),
    lifted: frozenset[str] = frozenset(),
    sensitive: SensitivePlan | None = None,
) -> SkipPlan:
    plan = functools.partial(
        plan_skips,
        analysis,
        keep_existing_bf16=options.keep_existing_bf16,
        skip_projected=options.skip_projected,
        no_promote=no_promote,
        lifted=lifted,
        sensitive=sensitive,
    )
    if not decision.changed:
        return plan() if lifted or sensitive is not None else first
    levels = decision.level_fn()
    if levels is not None:  # each level judged with the band of the recipe it measures (an FP8 what-if: FP8's)
        return plan(levels=levels, bands=decision.bands(analysis))
    if analysis.by_pattern(Pattern.UNIFORM):
        return plan(defer=True)
    return plan() if lifted or sensitive is not None else first


def _analysis_view(run: RunData, options: RecommendOptions) -> RunData:
    """The run with option-supplied num_layers / current recipe in its metadata (arrays shared, not copied)."""
    extra: dict[str, object] = {}
    if options.dims.num_layers and run.metadata.get("num_layers") != options.dims.num_layers:
        extra["num_layers"] = options.dims.num_layers
    logged = normalize_recipe(run.metadata.get("recipe") or run.metadata.get("fp8_recipe"))
    if options.current_recipe and logged != options.current_recipe:
        extra["recipe"] = options.current_recipe
    return replace(run, metadata={**run.metadata, **extra}) if extra else run


def _text(value: object) -> str | None:
    return str(value) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None
