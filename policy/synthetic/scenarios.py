"""The named planted-pattern scenarios and their machine-readable ground truth, for tests and the evaluation suite.

Belongs here: the `PATTERNS` vocabulary, `PlantedTruth`, `ScenarioCase`, `make_case`, `SCENARIOS` (one per
pattern, FP8 runs) and `FRONTIER_SCENARIOS` (TE 2.20 NVFP4 and MXFP8 runs, and TE's garbage scale_inv values).
Must not be here: profile or selector building blocks (`profiles`), file writing, and any web or database import.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fp8_policy.policy.synthetic.profiles import (
    Rule,
    Scenario,
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
    with_values,
)
from fp8_policy.policy.synthetic.run import SyntheticRun, matching_layers

PATTERNS: tuple[str, ...] = (
    "healthy",
    "u_shape",
    "head_only",
    "early_layers",
    "late_layers",
    "boundary",
    "single_tensor",
    "rising_trend",
    "uniform",
    "rank_outlier",
    "overflow",
    "scale_instability",
)


# ---------------------------------------------------------------------------------------------------- scenarios
@dataclass(frozen=True)
class PlantedTruth:
    """What a scenario planted, for the evaluation suite."""

    patterns: frozenset[str]  # from PATTERNS
    skip_layers: frozenset[str]  # layers a good recommendation keeps in BF16 (exact logged names)
    signals: frozenset[tuple[str, str, str]] = frozenset()  # (layer, tensor, stat) series carrying the signal
    outlier_ranks: frozenset[int] = frozenset()  # ranks whose values alone carry the signal
    recipe_change: bool = False  # the right fix is a different recipe, not skipping layers


@dataclass(frozen=True)
class ScenarioCase:
    name: str
    description: str
    run: SyntheticRun
    truth: PlantedTruth


def make_case(
    name: str,
    description: str,
    run: SyntheticRun,
    rules: list[Rule],
    patterns: set[str],
    *,
    skip: bool = True,
    recipe_change: bool = False,
) -> ScenarioCase:
    """A case whose run profile is `Scenario(rules)` and whose truth is derived from the same rules."""
    run = replace(run, profile=Scenario(tuple(rules)))
    signals = {
        (layer, tensor, stat)
        for rule in rules
        for layer in matching_layers(run, rule.where)
        for tensor in ((rule.tensor,) if rule.tensor else run.tensors)
        for stat in ((rule.stat,) if rule.stat else run.all_stats)
    }
    outliers = frozenset().union(*(r.ranks for r in rules if r.ranks is not None))
    skip_layers = frozenset(layer for layer, _, _ in signals) if skip else frozenset()
    truth = PlantedTruth(frozenset(patterns), skip_layers, frozenset(signals), outliers, recipe_change)
    return ScenarioCase(name, description, run, truth)


def _small(family: str = "esm2", **kwargs: object) -> SyntheticRun:
    base: dict[str, object] = {"family": family, "num_layers": 12, "iterations": 400, "freq": 10}
    return SyntheticRun(**{**base, **kwargs})  # type: ignore[arg-type]


def _scenarios() -> dict[str, ScenarioCase]:
    grad, act, uf = "gradient", "activation", "underflows%"
    tail = frozenset(n for o in (9, 10, 11) for n in _small("megatron").block(o)) | {"model.module.output_layer"}
    cases = [
        make_case("healthy", "every layer healthy", _small(seed=1), [], {"healthy"}),
        make_case(
            "u_shape",
            "gradient underflow 3-6 % in the first 3 and last 3 blocks",
            _small(seed=2),
            [Rule(any_of(first_blocks(3), last_blocks(3)), level((3.0, 6.0)), grad, uf)],
            {"u_shape"},
        ),
        make_case(
            "head_only",
            "lm_head gradient 6-10 % and activation 2.5-4 % underflow",
            _small("llama", seed=3),
            [Rule(heads(), level((6.0, 10.0)), grad, uf), Rule(heads(), level((2.5, 4.0)), act, uf)],
            {"head_only"},
        ),
        make_case(
            "early_layers",
            "gradient underflow 3-5 % in the first 3 blocks",
            _small("megatron", seed=4),
            [Rule(first_blocks(3), level((3.0, 5.0)), grad, uf)],
            {"early_layers"},
        ),
        make_case(
            "late_layers",
            "gradient underflow 3-5 % in the last 3 blocks (0-based names)",
            _small("gpt", first_index=0, seed=5),
            [Rule(last_blocks(3), level((3.0, 5.0)), grad, uf)],
            {"late_layers"},
        ),
        make_case(
            "boundary",
            "fc2 activation underflow 8 -> 18 % in the last FP8 block before a BF16 tail",
            _small("megatron", bf16_layers=tail, seed=6),
            [Rule(all_of(blocks(8), roles("fc2")), ramp(8.0, 18.0), act, uf)],
            {"boundary"},
        ),
        make_case(
            "single_tensor",
            "one tensor of one layer: proj gradient underflow ~5 %",
            _small(seed=7),
            [Rule(all_of(blocks(5), roles("proj")), level(5.0), grad, uf)],
            {"single_tensor"},
        ),
        make_case(
            "rising_trend",
            "fc1 gradient underflow of two blocks grows 0.2 -> 8 %",
            _small("llama", seed=8),
            [Rule(all_of(blocks(4, 7), roles("fc1")), ramp(0.2, 8.0), grad, uf)],
            {"rising_trend"},
        ),
        make_case(
            "uniform",
            "every layer 2.5-3.5 % gradient underflow; mxfp8 what-if stays healthy",
            _small(seed=9, extra_stats=("mxfp8_underflows%",)),
            [Rule(everywhere(), level((2.5, 3.5)), grad, uf)],
            {"uniform"},
            skip=False,
            recipe_change=True,
        ),
        make_case(
            "rank_outlier",
            "rank 2 of 4: gradient underflow 4-7 % on every layer",
            _small(num_layers=8, ranks=4, seed=10),
            [Rule(everywhere(), level((4.0, 7.0)), grad, uf, frozenset({2}))],
            {"rank_outlier"},
            skip=False,
        ),
        make_case(
            "overflow",
            "DelayedScaling: fc1 activation overflows 0.5-2 % in blocks 2 and 3",
            _small("megatron", extra_stats="overflows%", te_plan_word="FP8 Quantize", seed=11),
            [Rule(all_of(blocks(2, 3), roles("fc1")), level((0.5, 2.0)), act, "overflows%")],
            {"overflow"},
        ),
        make_case(
            "scale_instability",
            "activation scale_inv of block 6 qkv/proj jumps by x16",
            _small("llama", seed=12),
            [
                Rule(all_of(blocks(6), roles("qkv", "proj")), scale_jumps(16.0), act, stat)
                for stat in ("scale_inv_min", "scale_inv_max")
            ],
            {"scale_instability"},
        ),
    ]
    return {case.name: case for case in cases}


SCENARIOS: dict[str, ScenarioCase] = _scenarios()


# ---------------------------------------------------------------------------------------------------- frontier
NVFP4_STATS: tuple[str, ...] = ("nvfp4_underflows%", "nvfp4_mse")  # LogNvfp4TensorStats: no bare stat exists
BLOCK_WHATIF_STATS: tuple[str, ...] = (
    "fp8_block_scaling_underflows%",
    "fp8_block_scaling_scale_inv_min",
    "fp8_block_scaling_scale_inv_max",
)
TE_GARBAGE_SCALE = -95602196480.0  # a block-scaling what-if scale_inv_min TE 2.20.2 logged on an H100


def _frontier() -> dict[str, ScenarioCase]:
    grad, act, weight = "gradient", "activation", "weight"
    uf, scales = "nvfp4_underflows%", ("scale_inv_min", "scale_inv_max")
    mx = SyntheticRun(family="llama", num_layers=12, iterations=400, freq=10, seed=43)
    pad = replace(mx, family="esm2", seed=45)
    cases = [
        make_case(
            "nvfp4_healthy",
            "NVFP4 training: every layer at the format's own 5.5-7.5 % (weights 8.5-10.5 %) nvfp4_underflows%",
            _small("llama", seed=41, stats=NVFP4_STATS),
            [],
            {"healthy"},
        ),
        make_case(
            "nvfp4_late_layers",
            "NVFP4 training (B200): the last 2 blocks lose 15-30 % of their gradient non-zeros",
            _small("megatron", seed=42, stats=NVFP4_STATS),
            [Rule(last_blocks(2), level((15.0, 30.0)), grad, uf)],
            {"late_layers"},
        ),
        make_case(
            "mxfp8_scale_swing",
            "MXFP8 training: block 6 qkv/proj activation scale_inv E8M0 bytes swing by 10 (x1024) every other window",
            mx,
            [Rule(all_of(blocks(6), roles("qkv", "proj")), e8m0(scale_jumps(1024.0)), act, st) for st in scales],
            {"scale_instability"},
            skip=False,
        ),
        make_case(
            "block_whatif_garbage",
            "healthy FP8 run whose fp8_block_scaling_ what-if scale_inv_min holds TE's padding garbage",
            _small("esm2", seed=44, extra_stats=BLOCK_WHATIF_STATS),
            [
                Rule(
                    all_of(blocks(0, 5), roles("fc1")),
                    with_values(healthy(), {0: TE_GARBAGE_SCALE, 200: 0.0312}),
                    weight,
                    "fp8_block_scaling_scale_inv_min",
                )
            ],
            {"healthy"},
            skip=False,
        ),
        make_case(
            "mxfp8_padding_zero",
            "healthy MXFP8 run whose bare scale_inv_min logs the padding byte 0 at two iterations",
            pad,
            [Rule(all_of(blocks(3), roles("fc1")), with_values(e8m0(), {100: 0.0, 250: 0.0}), act, scales[0])],
            {"healthy"},
            skip=False,
        ),
    ]
    mxfp8 = {"mxfp8_scale_swing", "mxfp8_padding_zero"}  # MXFP8 training: every scale_inv is an E8M0 byte
    out = {}
    for case in cases:
        if case.name in mxfp8 and isinstance(case.run.profile, Scenario):
            case = replace(case, run=replace(case.run, profile=replace(case.run.profile, default=e8m0())))
        out[case.name] = case
    return out


FRONTIER_SCENARIOS: dict[str, ScenarioCase] = _frontier()
