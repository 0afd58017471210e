"""The labelled evaluation suite: synthetic runs with planted patterns and the decisions a good policy makes.

`SUITE` holds the 12 `policy.synthetic.SCENARIOS` plus variants that widen coverage: every pattern in at least two
naming families (esm2, llama, megatron, gpt), 1-, 4- and 8-rank runs, other seeds, iteration counts and noise
levels, 0-based (gpt, `first_index=0`) and 1-based block names, BF16 neighbours on either side, and combined
cases (two patterns planted in one run). Runs are small (200-400 iterations, freq 10) so `make eval` stays short.

Ground truth comes from `policy.synthetic.make_case`, i.e. from the planted rules themselves: the planted
patterns and the (layer, tensor, stat) series carrying a signal (`truth.signals`). `truth.skip_layers` is
re-derived from the same rules: the layers of every rule that plants an underflows% signal on all ranks (see the
recipe conventions below for the rules that do not ask for skips). Scoring conventions (used by bench/eval.py,
stated here once):

* Patterns: per case, the planted pattern set vs. `Analysis.patterns()`. True positives are planted patterns that
  were found, false alarms found patterns that were not planted, misses planted patterns not found. Precision and
  recall are micro-averaged over all cases. `healthy` is a pattern like the others (planted only in healthy runs).
* Skip list: a layer counts as *covered* when the recommendation puts it in `fp8_skip_layers` OR gives it a GEMM
  override (either keeps the failing tensor out of FP8). Per case, the truth `skip_layers` vs. the covered set;
  precision/recall micro-averaged over all cases. Layers that already ran in BF16 (a `bf16_layers` tail) are not
  part of either set: the recommender keeps them out of `fp8_skip_layers` by default.
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
    FRONTIER_SCENARIOS,
    SCENARIOS,
    PlantedTruth,
    Profile,
    ProfileContext,
    Rule,
    Scenario,
    ScenarioCase,
    SyntheticRun,
    all_of,
    any_of,
    blocks,
    e8m0,
    everywhere,
    first_blocks,
    heads,
    healthy,
    last_blocks,
    level,
    make_case,
    matching_layers,
    ramp,
    roles,
    scale_jumps,
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


def _run(family: str, **kwargs: object) -> SyntheticRun:
    base: dict[str, object] = {"family": family, "num_layers": 12, "iterations": 300, "freq": 10}
    return SyntheticRun(**{**base, **kwargs})  # type: ignore[arg-type]


def _is_skip_rule(rule: Rule) -> bool:
    """A rule whose layers a good policy keeps out of FP8: an underflow signal on every rank."""
    return rule.ranks is None and (rule.stat is None or split_stat(rule.stat)[1] == "underflows%")


def _is_recipe_rule(rule: Rule) -> bool:
    """A rule fixed by per-step scaling instead of skips: overflows% or scale_inv jumps under delayed scaling."""
    return rule.stat is not None and split_stat(rule.stat)[1] in ("overflows%", "scale_inv_min", "scale_inv_max")


def _wrap(case: ScenarioCase, tags: tuple[str, ...] = ()) -> EvalCase:
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


def _case(
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
    case = _wrap(
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


def _tail(run: SyntheticRun, ordinals: range, with_heads: bool = False) -> frozenset[str]:
    names = {name for o in ordinals for name in run.block(o)}
    if with_heads:
        names |= {s.name for s in run.layers() if s.ordinal is None}
    return frozenset(names)


def _variants() -> list[EvalCase]:
    # runs the boundary cases share (their BF16 tails are named from the run's own layers)
    llama, gpt, esm = _run("llama", seed=151), _run("gpt", first_index=0, seed=152), _run("esm2", seed=153)
    return [
        # healthy: other families, 8 ranks, warm-up at iteration 0, and noisy warning-band levels (never a skip)
        _case("healthy/llama-r8", "8 ranks, every layer healthy", _run("llama", ranks=8, seed=101), []),
        _case(
            "healthy/gpt0-warmup",
            "0-based names, DelayedScaling warm-up at iteration 0",
            _run("gpt", first_index=0, seed=102, iterations=200, profile=healthy(warmup=True)),
            [],
        ),
        _case(
            "healthy/megatron-warnband",
            "every layer in the warning band (0.4-1.8 % gradient, below critical): noise, not a signal",
            _run("megatron", seed=103),
            [],
            tags=("noise",),
            default=healthy((0.4, 1.2)),
        ),
        _case(
            "healthy/esm2-r8-ranknoise",
            "8 ranks sharing 0.3-0.8 % levels, +-15 % rank-to-rank noise",
            _run("esm2", ranks=8, seed=104, iterations=200),
            [],
            tags=("noise",),
            default=rank_noise((0.3, 0.8), 0.15),
        ),
        # u_shape
        _case(
            "u_shape/llama-r8",
            "8 ranks: gradient underflow 3-6 % in the first/last 3 blocks",
            _run("llama", ranks=8, seed=111, iterations=200),
            [Rule(any_of(first_blocks(3), last_blocks(3)), level((3.0, 6.0)), GRAD, UF)],
        ),
        _case(
            "u_shape/gpt0-noisy",
            "0-based names, noisy (sigma 0.3) 3-6 % gradient underflow, 2+2 blocks",
            _run("gpt", first_index=0, seed=112),
            [Rule(any_of(first_blocks(2), last_blocks(2)), level((3.0, 6.0), noise=0.3), GRAD, UF)],
            tags=("noise",),
        ),
        _case(
            "u_shape/megatron-act",
            "16 blocks, layer-major line order: activation 4-8 % in the first 2 and last 3 blocks",
            _run("megatron", seed=113, num_layers=16, line_order="layer"),
            [Rule(any_of(first_blocks(2), last_blocks(3)), level((4.0, 8.0)), ACT, UF)],
        ),
        # head_only
        _case(
            "head_only/esm2",
            "both lm_head GEMMs (dense, decoder): gradient underflow 5-9 %",
            _run("esm2", seed=121),
            [Rule(heads(), level((5.0, 9.0)), GRAD, UF)],
        ),
        _case(
            "head_only/megatron",
            "output_layer gradient 6-10 % and activation 3 %",
            _run("megatron", seed=122, iterations=200),
            [Rule(heads(), level((6.0, 10.0)), GRAD, UF), Rule(heads(), level(3.0), ACT, UF)],
        ),
        _case(
            "head_only/gpt0-r8",
            "8 ranks, 0-based: lm_head gradient 4-6 %",
            _run("gpt", first_index=0, ranks=8, seed=123, iterations=200),
            [Rule(heads(), level((4.0, 6.0)), GRAD, UF)],
        ),
        # early_layers
        _case(
            "early_layers/esm2",
            "gradient underflow 3-5 % in the first 2 blocks",
            _run("esm2", seed=131),
            [Rule(first_blocks(2), level((3.0, 5.0)), GRAD, UF)],
        ),
        _case(
            "early_layers/gpt0",
            "0-based: block 0 all tensors 2.5-4 %",
            _run("gpt", first_index=0, seed=132),
            [Rule(first_blocks(1), level((2.5, 4.0)), None, UF)],
        ),
        _case(
            "early_layers/llama-noisy",
            "first 4 blocks, noisy 3-5 % gradient underflow",
            _run("llama", seed=133, iterations=400),
            [Rule(first_blocks(4), level((3.0, 5.0), noise=0.3), GRAD, UF)],
            tags=("noise",),
        ),
        # late_layers
        _case(
            "late_layers/llama",
            "gradient underflow 3-5 % in the last 2 blocks",
            _run("llama", seed=141),
            [Rule(last_blocks(2), level((3.0, 5.0)), GRAD, UF)],
        ),
        _case(
            "late_layers/esm2-r8",
            "8 ranks: last 3 blocks and both heads, gradient 3-5 %",
            _run("esm2", ranks=8, seed=142, iterations=200),
            [Rule(any_of(last_blocks(3), heads()), level((3.0, 5.0)), GRAD, UF)],
        ),
        _case(
            "late_layers/megatron",
            "last 3 blocks: activation 2.5-3.5 %",
            _run("megatron", seed=143),
            [Rule(last_blocks(3), level((2.5, 3.5)), ACT, UF)],
        ),
        # boundary
        _case(
            "boundary/llama",
            "fc2 activation 8 -> 18 % before a 3-block + head BF16 tail (Disabled lines)",
            replace(llama, bf16_layers=_tail(llama, range(9, 12), with_heads=True), disabled_via_feature=True),
            [Rule(all_of(blocks(8), roles("fc2")), ramp(8.0, 18.0), ACT, UF)],
        ),
        _case(
            "boundary/gpt0-head",
            "0-based: last block fc1 gradient 3 -> 9 % next to a BF16 lm_head",
            replace(gpt, bf16_layers=_tail(gpt, range(0), with_heads=True)),
            [Rule(all_of(blocks(11), roles("fc1")), ramp(3.0, 9.0), GRAD, UF)],
        ),
        _case(
            "boundary/esm2-front",
            "BF16 first 2 blocks: block 3 qkv activation 6 -> 14 %",
            replace(esm, bf16_layers=_tail(esm, range(0, 2))),
            [Rule(all_of(blocks(2), roles("qkv")), ramp(6.0, 14.0), ACT, UF)],
        ),
        # single_tensor
        _case(
            "single_tensor/megatron-act",
            "block 7 fc1 activation ~4 %",
            _run("megatron", seed=161),
            [Rule(all_of(blocks(7), roles("fc1")), level(4.0), ACT, UF)],
        ),
        _case(
            "single_tensor/gpt0-weight",
            "0-based: block 5 qkv weight ~3 %",
            _run("gpt", first_index=0, seed=162),
            [Rule(all_of(blocks(5), roles("qkv")), level(3.0), WEIGHT, UF)],
        ),
        _case(
            "single_tensor/llama-r8",
            "8 ranks: block 6 fc2 gradient ~5 % on every rank",
            _run("llama", ranks=8, seed=163, iterations=200),
            [Rule(all_of(blocks(6), roles("fc2")), level(5.0), GRAD, UF)],
        ),
        # rising_trend
        _case(
            "rising_trend/esm2",
            "block 6 proj gradient grows 0.1 -> 6 %",
            _run("esm2", seed=171, iterations=400),
            [Rule(all_of(blocks(6), roles("proj")), ramp(0.1, 6.0), GRAD, UF)],
        ),
        _case(
            "rising_trend/megatron-r8",
            "8 ranks: blocks 4 and 5 fc2 activation 0.2 -> 7 %",
            _run("megatron", ranks=8, seed=172, iterations=200),
            [Rule(all_of(blocks(4, 5), roles("fc2")), ramp(0.2, 7.0), ACT, UF)],
        ),
        _case(
            "rising_trend/llama-projected",
            "block 5 fc2 gradient 0.2 -> 1.6 %: below critical, projected to cross it (watched, not skipped)",
            _run("llama", seed=173, iterations=400),
            [Rule(all_of(blocks(5), roles("fc2")), ramp(0.2, 1.6), GRAD, UF)],
            watch_only=True,
        ),
        # uniform
        _case(
            "uniform/llama",
            "every layer 2.5-3.5 % gradient underflow, no what-if stats (-> block)",
            _run("llama", seed=181),
            [Rule(everywhere(), level((2.5, 3.5)), GRAD, UF)],
        ),
        _case(
            "uniform/gpt0-block",
            "0-based, every layer 3-4 % gradient; fp8_block_scaling what-if healthy",
            _run("gpt", first_index=0, seed=182, extra_stats=("fp8_block_scaling_underflows%",)),
            [Rule(everywhere(), level((3.0, 4.0)), GRAD, UF)],
        ),
        _case(
            "uniform/megatron-r8",
            "8 ranks: every layer 2.5-4 % activation; mxfp8 what-if healthy",
            _run("megatron", ranks=8, seed=183, iterations=200, extra_stats=("mxfp8_underflows%",)),
            [Rule(everywhere(), level((2.5, 4.0)), ACT, UF)],
        ),
        # rank_outlier: a disagreeing rank -> finding, no skips
        _case(
            "rank_outlier/llama-r8",
            "rank 5 of 8: gradient underflow 4-7 % on every layer",
            _run("llama", ranks=8, seed=191, num_layers=8, iterations=200),
            [Rule(everywhere(), level((4.0, 7.0)), GRAD, UF, frozenset({5}))],
        ),
        _case(
            "rank_outlier/megatron-r8",
            "rank 0 of 8: activation 3-5 % in blocks 2-5 only",
            _run("megatron", ranks=8, seed=192, num_layers=8, iterations=200),
            [Rule(blocks(2, 3, 4, 5), level((3.0, 5.0)), ACT, UF, frozenset({0}))],
        ),
        # overflow (DelayedScaling: bare overflows% is logged)
        _case(
            "overflow/llama",
            "fc2 activation overflows 1-3 % in block 9",
            _run("llama", seed=201, extra_stats="overflows%", te_plan_word="FP8 Quantize"),
            [Rule(all_of(blocks(9), roles("fc2")), level((1.0, 3.0)), ACT, "overflows%")],
        ),
        _case(
            "overflow/gpt0-r8",
            "8 ranks, 0-based: qkv gradient overflows 0.5-1 % in blocks 0-1",
            _run("gpt", first_index=0, ranks=8, seed=202, iterations=200, extra_stats="overflows%"),
            [Rule(all_of(blocks(0, 1), roles("qkv")), level((0.5, 1.0)), GRAD, "overflows%")],
        ),
        # scale_instability
        _case(
            "scale_instability/esm2",
            "weight scale_inv of block 3 fc1 jumps by x32",
            _run("esm2", seed=211),
            [
                Rule(all_of(blocks(3), roles("fc1")), scale_jumps(32.0), WEIGHT, stat)
                for stat in ("scale_inv_min", "scale_inv_max")
            ],
        ),
        _case(
            "scale_instability/megatron-r8",
            "8 ranks: activation scale_inv of block 10 fc2 jumps by x16",
            _run("megatron", ranks=8, seed=212, iterations=200),
            [
                Rule(all_of(blocks(10), roles("fc2")), scale_jumps(16.0), ACT, stat)
                for stat in ("scale_inv_min", "scale_inv_max")
            ],
        ),
        # combined cases
        # Failing heads with failing first and last blocks are the U-shape bionemo documents ("layers 1-5 and
        # 29-33 plus head"): one u_shape finding that lists the heads, not a head_only ("only the head") finding.
        _case(
            "combo/u_shape+heads-esm2",
            "first/last 3 blocks gradient 3-6 % and both heads 6-10 % (the make-bench run, small)",
            _run("esm2", seed=221),
            [
                Rule(any_of(first_blocks(3), last_blocks(3)), level((3.0, 6.0)), GRAD, UF),
                Rule(heads(), level((6.0, 10.0)), GRAD, UF),
            ],
            patterns={"u_shape"},
        ),
        _case(
            "combo/early+single_tensor-llama",
            "first 2 blocks gradient 3-5 % and block 7 proj activation 4 %",
            _run("llama", seed=222),
            [
                Rule(first_blocks(2), level((3.0, 5.0)), GRAD, UF),
                Rule(all_of(blocks(7), roles("proj")), level(4.0), ACT, UF),
            ],
            patterns={"early_layers", "single_tensor"},
        ),
        _case(
            "combo/late+overflow-megatron",
            "last 2 blocks gradient 3-5 % and block 4 fc1 activation overflows",
            _run("megatron", seed=223, extra_stats="overflows%"),
            [
                Rule(last_blocks(2), level((3.0, 5.0)), GRAD, UF),
                Rule(all_of(blocks(4), roles("fc1")), level((0.5, 2.0)), ACT, "overflows%"),
            ],
            patterns={"late_layers", "overflow"},
        ),
        _case(
            "combo/boundary+rising_trend-gpt0",
            "0-based: last block fc1 gradient 1 -> 6 % next to a BF16 "
            "lm_head: it crosses critical mid-run, so it is also a late-onset rising trend",
            replace(gpt, seed=225, bf16_layers=_tail(gpt, range(0), with_heads=True)),
            [Rule(all_of(blocks(11), roles("fc1")), ramp(1.0, 6.0), GRAD, UF)],
            patterns={"boundary", "rising_trend"},
        ),
        _case(
            "combo/rising+rank_outlier-gpt0-r8",
            "8 ranks, 0-based: block 5 fc1 gradient 0.2 -> 7 % on all ranks, rank 3 activation 3-5 % everywhere",
            _run("gpt", first_index=0, ranks=8, seed=224, iterations=200),
            [
                Rule(all_of(blocks(5), roles("fc1")), ramp(0.2, 7.0), GRAD, UF),
                Rule(everywhere(), level((3.0, 5.0)), ACT, UF, frozenset({3})),
            ],
            patterns={"rising_trend", "rank_outlier"},
        ),
    ]


FRONTIER_RECIPES: dict[str, frozenset[str]] = {
    "nvfp4_healthy": frozenset({"nvfp4"}),
    "nvfp4_late_layers": frozenset({"nvfp4"}),
    "block_whatif_garbage": KEEP,
    "mxfp8_padding_zero": frozenset({"mxfp8"}),
}


def _frontier_cases() -> list[EvalCase]:
    """The frontier scenarios plus variants in other families / rank counts (module docstring)."""
    nvfp4 = ("nvfp4_underflows%", "nvfp4_mse")
    cases = [
        replace(
            _wrap(case, ("frontier",)),
            name=f"frontier/{name}",
            expected_recipe=FRONTIER_RECIPES.get(name, _wrap(case).expected_recipe),
        )
        for name, case in FRONTIER_SCENARIOS.items()
    ]
    early = _case(
        "frontier/nvfp4-early-esm2-r4",
        "NVFP4 training, 4 ranks: the first 2 blocks lose 16-25 % of their activation non-zeros",
        _run("esm2", ranks=4, seed=231, iterations=200, stats=nvfp4),
        [Rule(first_blocks(2), level((16.0, 25.0)), ACT, "nvfp4_underflows%")],
        patterns={"early_layers"},
        tags=("frontier",),
    )
    swing = _case(
        "frontier/mxfp8-swing-megatron",
        "MXFP8 training: block 9 fc2 weight scale_inv bytes swing by 12 (x4096)",
        _run("megatron", seed=232),
        [
            Rule(all_of(blocks(9), roles("fc2")), e8m0(scale_jumps(4096.0)), WEIGHT, stat)
            for stat in ("scale_inv_min", "scale_inv_max")
        ],
        patterns={"scale_instability"},
        tags=("frontier",),
        default=e8m0(),
    )
    return [*cases, replace(early, expected_recipe=frozenset({"nvfp4"})), swing]


def build_suite() -> list[EvalCase]:
    base = [_wrap(case, ("base",)) for case in SCENARIOS.values()]
    return [*base, *_variants(), *_frontier_cases()]


SUITE: list[EvalCase] = build_suite()
SUITE_BY_NAME: dict[str, EvalCase] = {case.name: case for case in SUITE}

# The quick subset tests/bench runs (a few seconds): one per kind of decision, 1 and 8 ranks, two families.
QUICK: tuple[str, ...] = (
    "u_shape",
    "head_only",
    "single_tensor",
    "uniform",
    "overflow",
    "healthy/llama-r8",
    "boundary/gpt0-head",
    "scale_instability/esm2",
    "rank_outlier/llama-r8",
    "late_layers/esm2-r8",
    "combo/early+single_tensor-llama",
)
