"""The builders of bench/scenarios.py's evaluation cases: `EvalCase`, the synthetic-run defaults, and the ground
truth and scoring conventions every case follows (the tables of cases themselves live in bench/scenarios.py).

Ground truth comes from `policy.synthetic.make_case`, i.e. from the planted rules themselves: the planted
patterns and the (layer, tensor, stat) series carrying a signal (`truth.signals`). `truth.skip_layers` is
re-derived from the same rules: the layers of every rule that plants an underflows% signal on all ranks (see the
recipe conventions below for the rules that do not ask for skips). Scoring conventions (used by bench/eval.py,
stated here once):

* Patterns: per case, the planted pattern set vs. `Analysis.patterns()`. True positives are planted patterns that
  were found, false alarms found patterns that were not planted, misses planted patterns not found. Precision and
  recall are micro-averaged over all cases. `healthy` is a pattern like the others (planted only in healthy runs).
* Skip list: a layer counts as *covered* when the recommendation puts it in `fp8_skip_layers` OR gives it a GEMM
  override (either keeps the failing tensor out of FP8) OR, failing NVFP4, lifts it to an FP8 rung instead
  (`Recommendation.ladder.lifted`: the failing tensor leaves NVFP4; policy/recommend/ladder.py, the lift rule). Per
  case, the truth `skip_layers` vs. the covered set; precision/recall micro-averaged over all cases. Layers that
  already ran in BF16 (a `bf16_layers` tail) are not part of either set: the recommender keeps them out of
  `fp8_skip_layers` by default.
* Recipe decisions: the truth's `skip_layers` is emptied where the right fix is a recipe, not a skip list, and
  `expected_recipe` lists the acceptable recipes instead:
  - `uniform` (truth.recipe_change): a finer-grained recipe - the logged what-if recipe when it is better
    (mxfp8_* what-if -> "mxfp8", fp8_block_scaling_* -> "block"), else the finest the (assumed Hopper) GPU
    runs ("block");
  - `overflow` and `scale_instability` under delayed scaling: the recommender keeps every layer in FP8 and
    switches to per-step amax scaling ("current"; "block"/"mxfp8" would also fix it), so the truth expects a
    recipe change and no skips (policy/recommend/recipe.py rule 3);
  - `rank_outlier` (a rule limited to some ranks): neither skips nor a recipe change is wanted (a disagreeing
    rank is a data/hardware problem), so its layers are not in `skip_layers` and the recipe is not scored;
  - healthy runs (no planted signal, noise only): no change at all ("delayed", the assumed current recipe).
  In a combined case each rule follows its own convention (e.g. late_layers + overflow: the late layers are
  skip truth, the overflow layer is not, and the recipe must move to per-step scaling).
  Other cases do not score the recipe (`expected_recipe` None): a body layer sent to BF16 under delayed scaling
  legitimately moves the recipe to current scaling (rule 4).
* Watched trends: a rising trend still below critical (projected to cross it) is watched, not skipped
  (policy/recommend/skiplist.py), so its truth `skip_layers` is empty (`watch_only`).
* Planting limits: values are logged with 4 decimals, so gradient scale_inv (amax ~1e-4 / 57344 ~ 1e-8) always
  prints as 0.0000 and a gradient scale jump cannot be seen; scale_instability cases use activation/weight.
  A boundary ramp that starts below critical and crosses it mid-run is also a late-onset rising trend, so such a
  case plants both patterns.
* "Healthy layer skipped": any skipped or overridden layer that carries no planted signal at all (no series of it
  in `truth.signals`). This is the hard safety target; an extra skip of a layer that has a signal (e.g. a rank
  outlier's layer) only lowers precision.
* Frontier cases (`frontier/...`, tag "frontier": `policy.synthetic.FRONTIER_SCENARIOS` and variants): TE 2.20
  runs with no metadata, so the training recipe is read from the stats. NVFP4 runs keep NVFP4BlockScaling
  ("nvfp4") and their failing layers are the skip truth (judged with NVFP4's bands); the MXFP8 scale swing is a
  scale_instability with no skips (MXFP8 is already per-step scaling); TE's garbage block-scaling scale_inv and
  MXFP8's padding byte must change nothing (healthy, recipe kept: "delayed" — TE's default on the assumed
  Hopper — and "mxfp8"). `make eval` prints their totals next to the earlier cases'.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace

import numpy as np

from fp8_policy.policy.synthetic import (
    PlantedTruth,
    Profile,
    ProfileContext,
    Rule,
    Scenario,
    ScenarioCase,
    SyntheticRun,
    healthy,
    make_case,
    matching_layers,
    split_stat,
)

GRAD, ACT, WEIGHT, UF = "gradient", "activation", "weight", "underflows%"
PER_STEP_RECIPES = frozenset({"current", "block", "mxfp8"})  # fix overflow / scale lag of delayed scaling
KEEP = frozenset({"delayed"})  # TE's default, what the recommender assumes when nothing says otherwise


@dataclass(frozen=True)
class EvalCase:
    """One labelled run: the synthetic run, its planted truth and the recipe a good policy picks (None: any)."""

    name: str
    description: str
    run: SyntheticRun
    truth: PlantedTruth
    expected_recipe: frozenset[str] | None = None
    tags: tuple[str, ...] = ()

    @property
    def family(self) -> str:
        return self.run.family

    @property
    def signal_layers(self) -> frozenset[str]:
        """Layers with any planted signal; skipping any other layer is a healthy layer skipped."""
        return frozenset(layer for layer, _, _ in self.truth.signals)


def run_of(family: str, **kwargs: object) -> SyntheticRun:
    base: dict[str, object] = {"family": family, "num_layers": 12, "iterations": 300, "freq": 10}
    return SyntheticRun(**{**base, **kwargs})  # type: ignore[arg-type]


def _is_skip_rule(rule: Rule) -> bool:
    """A rule whose layers a good policy keeps out of FP8: an underflow signal on every rank."""
    return rule.ranks is None and (rule.stat is None or split_stat(rule.stat)[1] == "underflows%")


def _is_recipe_rule(rule: Rule) -> bool:
    """A rule fixed by per-step scaling instead of skips: overflows% or scale_inv jumps under delayed scaling."""
    return rule.stat is not None and split_stat(rule.stat)[1] in ("overflows%", "scale_inv_min", "scale_inv_max")


def wrap_case(case: ScenarioCase, tags: tuple[str, ...] = ()) -> EvalCase:
    """Apply the conventions of the module docstring to a make_case truth (re-derived from the run's rules)."""
    rules = case.run.profile.rules if isinstance(case.run.profile, Scenario) else ()
    truth = case.truth
    expected: frozenset[str] | None = None
    if truth.recipe_change:  # uniform: a finer recipe, no skip list
        whatif = {"mxfp8": "mxfp8", "fp8_block_scaling": "block"}
        logged = [r for prefix, r in whatif.items() if any(s.startswith(prefix + "_") for s in case.run.all_stats)]
        expected = frozenset(logged or ["block"])
        skip: frozenset[str] = frozenset()
    else:
        skip = frozenset(
            name for rule in rules if _is_skip_rule(rule) for name in matching_layers(case.run, rule.where)
        )
        if any(_is_recipe_rule(rule) for rule in rules):
            expected = PER_STEP_RECIPES
        elif not truth.signals:
            expected = KEEP
    return EvalCase(case.name, case.description, case.run, replace(truth, skip_layers=skip), expected, tags)


def eval_case(
    name: str,
    description: str,
    run: SyntheticRun,
    rules: list[Rule],
    *,
    patterns: set[str] | None = None,
    watch_only: bool = False,
    tags: tuple[str, ...] = (),
    default: Profile | None = None,
) -> EvalCase:
    """A case from rules. `patterns`: the planted patterns, by default the name's first part ("u_shape/llama" ->
    {"u_shape"}); the tags are `tags` plus "combo" (a combo/ name) and "ranks8" (an 8-rank run); `default`: the
    profile of the series no rule plants (`healthy()` otherwise); `watch_only`: the signal stays below critical
    (a projected trend), nothing to skip."""
    patterns = {name.split("/")[0]} if patterns is None else patterns
    tags = (*(("combo",) if name.startswith("combo/") else ()), *tags, *(("ranks8",) if run.ranks == 8 else ()))
    recipe_change = "uniform" in patterns
    case = wrap_case(
        make_case(name, description, run, rules, patterns, skip=not recipe_change, recipe_change=recipe_change), tags
    )
    if default is not None:
        case = replace(case, run=replace(case.run, profile=Scenario(tuple(rules), default=default)))
    return replace(case, truth=replace(case.truth, skip_layers=frozenset())) if watch_only else case


def rank_noise(underflow: tuple[float, float], rank_sigma: float, point_sigma: float = 0.1) -> Profile:
    """Healthy values whose underflows% level is shared by all ranks (drawn per layer/tensor/stat in `underflow`)
    and differs per rank by lognormal(0, rank_sigma): ranks of one data-parallel job agree up to noise."""
    base = healthy()

    def profile(ctx: ProfileContext) -> np.ndarray:
        if ctx.base_stat != "underflows%":
            return base(ctx)
        key = zlib.crc32(f"{ctx.layer}|{ctx.tensor}|{ctx.stat}".encode())
        center = np.random.default_rng([ctx.seed, key]).uniform(*underflow)
        rng = ctx.rng("rank_noise")
        return center * rng.lognormal(0.0, rank_sigma) * rng.lognormal(0.0, point_sigma, len(ctx.iterations))

    return profile


def tail_layers(run: SyntheticRun, ordinals: range, with_heads: bool = False) -> frozenset[str]:
    names = {name for o in ordinals for name in run.block(o)}
    if with_heads:
        names |= {s.name for s in run.layers() if s.ordinal is None}
    return frozenset(names)
