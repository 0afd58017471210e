"""The labelled evaluation suite: synthetic runs with planted patterns and the decisions a good policy makes.

`SUITE` holds the 12 `policy.synthetic.SCENARIOS` plus variants that widen coverage: every pattern in at least two
naming families (esm2, llama, megatron, gpt), 1-, 4- and 8-rank runs, other seeds, iteration counts and noise
levels, 0-based (gpt, `first_index=0`) and 1-based block names, BF16 neighbours on either side, and combined
cases (two patterns planted in one run). Runs are small (200-400 iterations, freq 10) so `make eval` stays short.

Ground truth and the scoring conventions (used by bench/eval.py): bench/scenario_builders.py, which also
builds the cases.
"""

from __future__ import annotations

from dataclasses import replace

from bench.scenario_builders import (
    ACT,
    GRAD,
    KEEP,
    UF,
    WEIGHT,
    EvalCase,
    eval_case,
    rank_noise,
    run_of,
    tail_layers,
    wrap_case,
)
from bench.scenario_builders import PER_STEP_RECIPES as PER_STEP_RECIPES  # re-exported for tests/bench
from fp8_policy.policy.synthetic import (
    FRONTIER_SCENARIOS,
    SCENARIOS,
    Rule,
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
    ramp,
    roles,
    scale_jumps,
)


def _variants() -> list[EvalCase]:
    # runs the boundary cases share (their BF16 tails are named from the run's own layers)
    llama, gpt, esm = run_of("llama", seed=151), run_of("gpt", first_index=0, seed=152), run_of("esm2", seed=153)
    return [
        # healthy: other families, 8 ranks, warm-up at iteration 0, and noisy warning-band levels (never a skip)
        eval_case("healthy/llama-r8", "8 ranks, every layer healthy", run_of("llama", ranks=8, seed=101), []),
        eval_case(
            "healthy/gpt0-warmup",
            "0-based names, DelayedScaling warm-up at iteration 0",
            run_of("gpt", first_index=0, seed=102, iterations=200, profile=healthy(warmup=True)),
            [],
        ),
        eval_case(
            "healthy/megatron-warnband",
            "every layer in the warning band (0.4-1.8 % gradient, below critical): noise, not a signal",
            run_of("megatron", seed=103),
            [],
            tags=("noise",),
            default=healthy((0.4, 1.2)),
        ),
        eval_case(
            "healthy/esm2-r8-ranknoise",
            "8 ranks sharing 0.3-0.8 % levels, +-15 % rank-to-rank noise",
            run_of("esm2", ranks=8, seed=104, iterations=200),
            [],
            tags=("noise",),
            default=rank_noise((0.3, 0.8), 0.15),
        ),
        # u_shape
        eval_case(
            "u_shape/llama-r8",
            "8 ranks: gradient underflow 3-6 % in the first/last 3 blocks",
            run_of("llama", ranks=8, seed=111, iterations=200),
            [Rule(any_of(first_blocks(3), last_blocks(3)), level((3.0, 6.0)), GRAD, UF)],
        ),
        eval_case(
            "u_shape/gpt0-noisy",
            "0-based names, noisy (sigma 0.3) 3-6 % gradient underflow, 2+2 blocks",
            run_of("gpt", first_index=0, seed=112),
            [Rule(any_of(first_blocks(2), last_blocks(2)), level((3.0, 6.0), noise=0.3), GRAD, UF)],
            tags=("noise",),
        ),
        eval_case(
            "u_shape/megatron-act",
            "16 blocks, layer-major line order: activation 4-8 % in the first 2 and last 3 blocks",
            run_of("megatron", seed=113, num_layers=16, line_order="layer"),
            [Rule(any_of(first_blocks(2), last_blocks(3)), level((4.0, 8.0)), ACT, UF)],
        ),
        # head_only
        eval_case(
            "head_only/esm2",
            "both lm_head GEMMs (dense, decoder): gradient underflow 5-9 %",
            run_of("esm2", seed=121),
            [Rule(heads(), level((5.0, 9.0)), GRAD, UF)],
        ),
        eval_case(
            "head_only/megatron",
            "output_layer gradient 6-10 % and activation 3 %",
            run_of("megatron", seed=122, iterations=200),
            [Rule(heads(), level((6.0, 10.0)), GRAD, UF), Rule(heads(), level(3.0), ACT, UF)],
        ),
        eval_case(
            "head_only/gpt0-r8",
            "8 ranks, 0-based: lm_head gradient 4-6 %",
            run_of("gpt", first_index=0, ranks=8, seed=123, iterations=200),
            [Rule(heads(), level((4.0, 6.0)), GRAD, UF)],
        ),
        # early_layers
        eval_case(
            "early_layers/esm2",
            "gradient underflow 3-5 % in the first 2 blocks",
            run_of("esm2", seed=131),
            [Rule(first_blocks(2), level((3.0, 5.0)), GRAD, UF)],
        ),
        eval_case(
            "early_layers/gpt0",
            "0-based: block 0 all tensors 2.5-4 %",
            run_of("gpt", first_index=0, seed=132),
            [Rule(first_blocks(1), level((2.5, 4.0)), None, UF)],
        ),
        eval_case(
            "early_layers/llama-noisy",
            "first 4 blocks, noisy 3-5 % gradient underflow",
            run_of("llama", seed=133, iterations=400),
            [Rule(first_blocks(4), level((3.0, 5.0), noise=0.3), GRAD, UF)],
            tags=("noise",),
        ),
        # late_layers
        eval_case(
            "late_layers/llama",
            "gradient underflow 3-5 % in the last 2 blocks",
            run_of("llama", seed=141),
            [Rule(last_blocks(2), level((3.0, 5.0)), GRAD, UF)],
        ),
        eval_case(
            "late_layers/esm2-r8",
            "8 ranks: last 3 blocks and both heads, gradient 3-5 %",
            run_of("esm2", ranks=8, seed=142, iterations=200),
            [Rule(any_of(last_blocks(3), heads()), level((3.0, 5.0)), GRAD, UF)],
        ),
        eval_case(
            "late_layers/megatron",
            "last 3 blocks: activation 2.5-3.5 %",
            run_of("megatron", seed=143),
            [Rule(last_blocks(3), level((2.5, 3.5)), ACT, UF)],
        ),
        # boundary
        eval_case(
            "boundary/llama",
            "fc2 activation 8 -> 18 % before a 3-block + head BF16 tail (Disabled lines)",
            replace(llama, bf16_layers=tail_layers(llama, range(9, 12), with_heads=True), disabled_via_feature=True),
            [Rule(all_of(blocks(8), roles("fc2")), ramp(8.0, 18.0), ACT, UF)],
        ),
        eval_case(
            "boundary/gpt0-head",
            "0-based: last block fc1 gradient 3 -> 9 % next to a BF16 lm_head",
            replace(gpt, bf16_layers=tail_layers(gpt, range(0), with_heads=True)),
            [Rule(all_of(blocks(11), roles("fc1")), ramp(3.0, 9.0), GRAD, UF)],
        ),
        eval_case(
            "boundary/esm2-front",
            "BF16 first 2 blocks: block 3 qkv activation 6 -> 14 %",
            replace(esm, bf16_layers=tail_layers(esm, range(0, 2))),
            [Rule(all_of(blocks(2), roles("qkv")), ramp(6.0, 14.0), ACT, UF)],
        ),
        # single_tensor
        eval_case(
            "single_tensor/megatron-act",
            "block 7 fc1 activation ~4 %",
            run_of("megatron", seed=161),
            [Rule(all_of(blocks(7), roles("fc1")), level(4.0), ACT, UF)],
        ),
        eval_case(
            "single_tensor/gpt0-weight",
            "0-based: block 5 qkv weight ~3 %",
            run_of("gpt", first_index=0, seed=162),
            [Rule(all_of(blocks(5), roles("qkv")), level(3.0), WEIGHT, UF)],
        ),
        eval_case(
            "single_tensor/llama-r8",
            "8 ranks: block 6 fc2 gradient ~5 % on every rank",
            run_of("llama", ranks=8, seed=163, iterations=200),
            [Rule(all_of(blocks(6), roles("fc2")), level(5.0), GRAD, UF)],
        ),
        # rising_trend
        eval_case(
            "rising_trend/esm2",
            "block 6 proj gradient grows 0.1 -> 6 %",
            run_of("esm2", seed=171, iterations=400),
            [Rule(all_of(blocks(6), roles("proj")), ramp(0.1, 6.0), GRAD, UF)],
        ),
        eval_case(
            "rising_trend/megatron-r8",
            "8 ranks: blocks 4 and 5 fc2 activation 0.2 -> 7 %",
            run_of("megatron", ranks=8, seed=172, iterations=200),
            [Rule(all_of(blocks(4, 5), roles("fc2")), ramp(0.2, 7.0), ACT, UF)],
        ),
        eval_case(
            "rising_trend/llama-projected",
            "block 5 fc2 gradient 0.2 -> 1.6 %: below critical, projected to cross it (watched, not skipped)",
            run_of("llama", seed=173, iterations=400),
            [Rule(all_of(blocks(5), roles("fc2")), ramp(0.2, 1.6), GRAD, UF)],
            watch_only=True,
        ),
        # uniform
        eval_case(
            "uniform/llama",
            "every layer 2.5-3.5 % gradient underflow, no what-if stats (-> block)",
            run_of("llama", seed=181),
            [Rule(everywhere(), level((2.5, 3.5)), GRAD, UF)],
        ),
        eval_case(
            "uniform/gpt0-block",
            "0-based, every layer 3-4 % gradient; fp8_block_scaling what-if healthy",
            run_of("gpt", first_index=0, seed=182, extra_stats=("fp8_block_scaling_underflows%",)),
            [Rule(everywhere(), level((3.0, 4.0)), GRAD, UF)],
        ),
        eval_case(
            "uniform/megatron-r8",
            "8 ranks: every layer 2.5-4 % activation; mxfp8 what-if healthy",
            run_of("megatron", ranks=8, seed=183, iterations=200, extra_stats=("mxfp8_underflows%",)),
            [Rule(everywhere(), level((2.5, 4.0)), ACT, UF)],
        ),
        # rank_outlier: a disagreeing rank -> finding, no skips
        eval_case(
            "rank_outlier/llama-r8",
            "rank 5 of 8: gradient underflow 4-7 % on every layer",
            run_of("llama", ranks=8, seed=191, num_layers=8, iterations=200),
            [Rule(everywhere(), level((4.0, 7.0)), GRAD, UF, frozenset({5}))],
        ),
        eval_case(
            "rank_outlier/megatron-r8",
            "rank 0 of 8: activation 3-5 % in blocks 2-5 only",
            run_of("megatron", ranks=8, seed=192, num_layers=8, iterations=200),
            [Rule(blocks(2, 3, 4, 5), level((3.0, 5.0)), ACT, UF, frozenset({0}))],
        ),
        # overflow (DelayedScaling: bare overflows% is logged)
        eval_case(
            "overflow/llama",
            "fc2 activation overflows 1-3 % in block 9",
            run_of("llama", seed=201, extra_stats="overflows%", te_plan_word="FP8 Quantize"),
            [Rule(all_of(blocks(9), roles("fc2")), level((1.0, 3.0)), ACT, "overflows%")],
        ),
        eval_case(
            "overflow/gpt0-r8",
            "8 ranks, 0-based: qkv gradient overflows 0.5-1 % in blocks 0-1",
            run_of("gpt", first_index=0, ranks=8, seed=202, iterations=200, extra_stats="overflows%"),
            [Rule(all_of(blocks(0, 1), roles("qkv")), level((0.5, 1.0)), GRAD, "overflows%")],
        ),
        # scale_instability
        eval_case(
            "scale_instability/esm2",
            "weight scale_inv of block 3 fc1 jumps by x32",
            run_of("esm2", seed=211),
            [
                Rule(all_of(blocks(3), roles("fc1")), scale_jumps(32.0), WEIGHT, stat)
                for stat in ("scale_inv_min", "scale_inv_max")
            ],
        ),
        eval_case(
            "scale_instability/megatron-r8",
            "8 ranks: activation scale_inv of block 10 fc2 jumps by x16",
            run_of("megatron", ranks=8, seed=212, iterations=200),
            [
                Rule(all_of(blocks(10), roles("fc2")), scale_jumps(16.0), ACT, stat)
                for stat in ("scale_inv_min", "scale_inv_max")
            ],
        ),
        # combined cases
        # Failing heads with failing first and last blocks are the U-shape bionemo documents ("layers 1-5 and
        # 29-33 plus head"): one u_shape finding that lists the heads, not a head_only ("only the head") finding.
        eval_case(
            "combo/u_shape+heads-esm2",
            "first/last 3 blocks gradient 3-6 % and both heads 6-10 % (the make-bench run, small)",
            run_of("esm2", seed=221),
            [
                Rule(any_of(first_blocks(3), last_blocks(3)), level((3.0, 6.0)), GRAD, UF),
                Rule(heads(), level((6.0, 10.0)), GRAD, UF),
            ],
            patterns={"u_shape"},
        ),
        eval_case(
            "combo/early+single_tensor-llama",
            "first 2 blocks gradient 3-5 % and block 7 proj activation 4 %",
            run_of("llama", seed=222),
            [
                Rule(first_blocks(2), level((3.0, 5.0)), GRAD, UF),
                Rule(all_of(blocks(7), roles("proj")), level(4.0), ACT, UF),
            ],
            patterns={"early_layers", "single_tensor"},
        ),
        eval_case(
            "combo/late+overflow-megatron",
            "last 2 blocks gradient 3-5 % and block 4 fc1 activation overflows",
            run_of("megatron", seed=223, extra_stats="overflows%"),
            [
                Rule(last_blocks(2), level((3.0, 5.0)), GRAD, UF),
                Rule(all_of(blocks(4), roles("fc1")), level((0.5, 2.0)), ACT, "overflows%"),
            ],
            patterns={"late_layers", "overflow"},
        ),
        eval_case(
            "combo/boundary+rising_trend-gpt0",
            "0-based: last block fc1 gradient 1 -> 6 % next to a BF16 "
            "lm_head: it crosses critical mid-run, so it is also a late-onset rising trend",
            replace(gpt, seed=225, bf16_layers=tail_layers(gpt, range(0), with_heads=True)),
            [Rule(all_of(blocks(11), roles("fc1")), ramp(1.0, 6.0), GRAD, UF)],
            patterns={"boundary", "rising_trend"},
        ),
        eval_case(
            "combo/rising+rank_outlier-gpt0-r8",
            "8 ranks, 0-based: block 5 fc1 gradient 0.2 -> 7 % on all ranks, rank 3 activation 3-5 % everywhere",
            run_of("gpt", first_index=0, ranks=8, seed=224, iterations=200),
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
            wrap_case(case, ("frontier",)),
            name=f"frontier/{name}",
            expected_recipe=FRONTIER_RECIPES.get(name, wrap_case(case).expected_recipe),
        )
        for name, case in FRONTIER_SCENARIOS.items()
    ]
    early = eval_case(
        "frontier/nvfp4-early-esm2-r4",
        "NVFP4 training, 4 ranks: the first 2 blocks lose 16-25 % of their activation non-zeros",
        run_of("esm2", ranks=4, seed=231, iterations=200, stats=nvfp4),
        [Rule(first_blocks(2), level((16.0, 25.0)), ACT, "nvfp4_underflows%")],
        patterns={"early_layers"},
        tags=("frontier",),
    )
    swing = eval_case(
        "frontier/mxfp8-swing-megatron",
        "MXFP8 training: block 9 fc2 weight scale_inv bytes swing by 12 (x4096)",
        run_of("megatron", seed=232),
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
    base = [wrap_case(case, ("base",)) for case in SCENARIOS.values()]
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
