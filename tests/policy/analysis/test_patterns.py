"""One planted run per layer pattern: the pattern is found, with the right layers, and nothing healthy is blamed."""

from __future__ import annotations

import pytest

from fp8_policy.policy.analysis import Pattern, Severity, Thresholds, analyze
from fp8_policy.policy.analysis.patterns import block_ranges
from tests.policy.analysis.factories import FAMILIES, Spec, blocks, build_run, heads, name, plant, ramp

BOTH = ("gradient", "activation")


def layers_of(family: str, block_list: list[int]) -> list[str]:
    return [name(family, b, sub) for b in block_list for sub in FAMILIES[family]["subs"]]  # type: ignore[union-attr]


def plant_both(spec: Spec, layers: list[str], level: float = 3.0) -> Spec:
    for tensor in BOTH:
        plant(spec, layers, tensor, level)
    return spec


def assert_only_planted_layers(analysis, planted: set[str]) -> None:
    blamed = {layer for f in analysis.findings for layer in f.layers}
    assert blamed == planted


@pytest.mark.parametrize(("family", "ranks"), [("megatron", 1), ("esm2", 8), ("hf", 1)])
def test_healthy_run_has_only_the_healthy_finding(family: str, ranks: int) -> None:
    analysis = analyze(build_run(Spec(family=family, ranks=ranks, n_blocks=10)))
    assert [f.pattern for f in analysis.findings] == [Pattern.HEALTHY]
    assert analysis.findings[0].layers == ()
    assert "stay below 2%" in analysis.findings[0].summary


@pytest.mark.parametrize("family", ["esm2", "megatron", "hf"])
def test_u_shape(family: str) -> None:
    first = blocks(family, 12)
    planted = layers_of(family, first[:2] + first[-2:])
    analysis = analyze(build_run(plant_both(Spec(family=family, n_blocks=12), planted)))
    assert analysis.patterns() == {"u_shape"}
    assert set(analysis.by_pattern("u_shape")[0].layers) == set(planted)
    assert analysis.findings[0].severity >= Severity.CRITICAL


def test_wide_u_shape_is_positional_not_uniform() -> None:
    # 6 of 12 blocks fail (50 % > 40 %), but all at the ends: a layer problem, not a recipe problem.
    first = blocks("esm2", 12)
    planted = layers_of("esm2", first[:3] + first[-3:])
    analysis = analyze(build_run(plant_both(Spec(family="esm2", n_blocks=12, with_heads=False), planted)))
    assert analysis.patterns() == {"u_shape"}


def test_early_layers_8_ranks() -> None:
    planted = layers_of("megatron", [0, 1, 2])
    analysis = analyze(build_run(plant_both(Spec(n_blocks=12, ranks=8), planted)))
    assert analysis.patterns() == {"early_layers"}
    assert_only_planted_layers(analysis, set(planted))


def test_early_group_extends_contiguously_past_the_edge_region() -> None:
    planted = layers_of("megatron", [0, 1, 2, 3, 4])  # edge region is 3 blocks; 3 and 4 continue the run
    analysis = analyze(build_run(plant_both(Spec(n_blocks=12), planted)))
    assert analysis.patterns() == {"early_layers"}


def test_late_layers_with_head() -> None:
    planted = layers_of("hf", [10, 11]) + heads("hf")
    analysis = analyze(build_run(plant_both(Spec(family="hf", n_blocks=12), planted)))
    assert analysis.patterns() == {"late_layers"}
    assert set(analysis.by_pattern("late_layers")[0].layers) == set(planted)


def test_head_only() -> None:
    analysis = analyze(build_run(plant_both(Spec(family="esm2", n_blocks=8), heads("esm2"), 6.0)))
    assert analysis.patterns() == {"head_only"}
    finding = analysis.by_pattern("head_only")[0]
    assert set(finding.layers) == set(heads("esm2")) and finding.severity is Severity.SEVERE


def test_boundary_next_to_bf16_tail() -> None:
    spec = Spec(family="esm2", n_blocks=12, bf16_blocks=(11, 12), bf16_heads=True)
    boundary = name("esm2", 10, "fc2")
    plant(spec, [boundary], "activation", ramp(8.0, 18.0))
    analysis = analyze(build_run(spec))
    assert analysis.patterns() == {"boundary"}
    finding = analysis.by_pattern("boundary")[0]
    assert finding.layers == (boundary,)
    ev = finding.evidence[0]
    assert ev.tensor == "activation" and ev.end_level > ev.start_level and ev.reference < 0.1
    assert "block 11" in finding.summary and "->" in finding.summary


def test_same_growth_without_a_bf16_neighbour_is_not_boundary() -> None:
    spec = Spec(family="esm2", n_blocks=12)
    plant(spec, [name("esm2", 6, "fc2")], "activation", ramp(8.0, 18.0))
    assert "boundary" not in analyze(build_run(spec)).patterns()


def test_single_tensor_isolated_middle_layer() -> None:
    layer = name("megatron", 5, "proj")
    analysis = analyze(build_run(plant(Spec(n_blocks=12), [layer], "gradient", 5.0)))
    assert analysis.patterns() == {"single_tensor"}
    finding = analysis.by_pattern("single_tensor")[0]
    assert finding.layers == (layer,) and finding.evidence[0].tensor == "gradient"
    assert finding.evidence[0].reference < 0.1  # the layer's other tensors


def test_isolated_multi_tensor_failure_is_reported_by_half() -> None:
    layer = name("megatron", 7, "fc1")
    analysis = analyze(build_run(plant_both(Spec(n_blocks=12), [layer])))
    assert analysis.patterns() == {"late_layers"}
    assert analysis.by_pattern("late_layers")[0].layers == (layer,)


def test_uniform_replaces_positional_findings() -> None:
    every = layers_of("esm2", blocks("esm2", 10))
    analysis = analyze(build_run(plant(Spec(family="esm2", n_blocks=10, with_heads=False), every, "gradient", 3.0)))
    assert analysis.patterns() == {"uniform"}
    assert len(analysis.by_pattern("uniform")[0].layers) == 40
    assert "40 of 40 FP8 layers (100%)" in analysis.findings[0].summary


def test_uniform_fraction_override_changes_the_outcome() -> None:
    planted = layers_of("megatron", [0, 1, 2, 4, 5, 6, 7, 9, 10, 11])  # 10 of 12 blocks, 4 of 6 middle ones
    run = build_run(plant_both(Spec(n_blocks=12, with_heads=False), planted))
    assert analyze(run).patterns() == {"uniform"}
    assert "uniform" not in analyze(run, Thresholds(uniform_fraction=0.9)).patterns()


def test_critical_override_changes_the_outcome() -> None:
    planted = layers_of("megatron", [0, 11])
    run = build_run(plant_both(Spec(n_blocks=12, noise=0.05), planted, 3.0))
    assert analyze(run).patterns() == {"u_shape"}
    relaxed = analyze(run, Thresholds.from_overrides({"critical": 5.0, "severe": 8.0}))
    # no pattern, but 8 layers in the warning band: a `warning_band` finding (not `healthy`, which is never
    # warning) names them, so the findings, the layer table and gate --fail-on warning agree
    assert relaxed.patterns() == {"warning_band"} and relaxed.findings[0].severity is Severity.WARNING
    assert len(relaxed.findings[0].layers) == 8
    assert "8 layer(s) in the warning band" in relaxed.findings[0].summary


def test_findings_are_ordered_by_severity() -> None:
    spec = plant(Spec(n_blocks=12), layers_of("megatron", [0]), "gradient", 3.0)  # critical early
    plant(spec, heads("megatron"), "gradient", 9.0)  # severe head
    spec.overflow = {name("megatron", 6, "qkv"): 0.01}  # warning overflow
    analysis = analyze(build_run(spec))
    ranks = [f.severity.rank for f in analysis.findings]
    assert ranks == sorted(ranks, reverse=True) and len(analysis.findings) >= 2


def test_block_ranges() -> None:
    assert block_ranges([7, 1, 2, 3, 9, 10]) == "1-3, 7, 9-10"
    assert block_ranges([]) == ""


def test_failures_confined_to_one_sublayer_kind_are_not_a_recipe_problem() -> None:
    """Every fc1 and fc2 of a 4-block model fails its gradient (8 of 16 layers, 50 %, above uniform_fraction): the
    failure follows two of the four sublayer kinds, so it is answered per layer, never as `uniform`; the
    `module_kind` finding says which kinds fail. The same share spread over every kind is `uniform`."""
    spec = Spec(family="megatron", n_blocks=4, with_heads=False)
    confined = [name("megatron", b, sub) for b in blocks("megatron", 4) for sub in ("fc1", "fc2")]
    plant(spec, confined, "gradient", 4.0)
    analysis = analyze(build_run(spec))
    assert "uniform" not in analysis.patterns()
    assert {n for f in analysis.findings for n in f.layers} == set(confined)
    # the module-kind finding (module_kinds.py) names the kinds that fail and says the depth is not the cause
    assert analysis.patterns() == {"module_kind"}
    (summary,) = (f.summary for f in analysis.findings)
    assert "(mlp.linear_fc1, mlp.linear_fc2) fail in every block" in summary and "not the depth" in summary

    spread = Spec(family="megatron", n_blocks=4, with_heads=False)
    every_kind = [name("megatron", b, sub) for b in blocks("megatron", 4)[:3] for sub in ("qkv", "proj", "fc1", "fc2")]
    plant(spread, every_kind, "gradient", 4.0)
    assert analyze(build_run(spread)).patterns() == {"uniform"}
