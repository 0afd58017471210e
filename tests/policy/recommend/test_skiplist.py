"""Skip list and GEMM overrides: smallest set, per-tensor GEMM mapping, healthy layers never touched."""

from __future__ import annotations

import pytest

from fp8_policy.policy.analysis import analyze
from fp8_policy.policy.recommend.skiplist import plan_skips
from tests.policy.analysis.factories import FAMILIES, Spec, build_run, name, plant, ramp

SUBS = tuple(FAMILIES["megatron"]["subs"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("tensor", "gemms"),
    [
        ("activation", ("fprop", "wgrad")),
        ("gradient", ("dgrad", "wgrad")),
        ("weight", ("fprop", "dgrad")),
    ],
)
def test_one_failing_tensor_becomes_a_gemm_override(tensor: str, gemms: tuple[str, ...]) -> None:
    layer = name("megatron", 5, "fc2")
    plan = plan_skips(analyze(build_run(plant(Spec(n_blocks=12), [layer], tensor, 4.5))))
    assert plan.skip_layers == ()
    assert [(o.layer, o.gemms) for o in plan.overrides] == [(layer, gemms)]
    assert f"only {tensor} underflows% fails" in plan.overrides[0].reason


def test_two_failing_tensors_skip_the_layer() -> None:
    layer = name("megatron", 5, "fc2")
    spec = plant(plant(Spec(n_blocks=12), [layer], "gradient", 3.0), [layer], "weight", 3.0)
    plan = plan_skips(analyze(build_run(spec)))
    assert plan.skip_layers == (layer,) and plan.overrides == ()


def test_u_shape_skips_exactly_the_failing_layers_never_a_healthy_middle_one() -> None:
    failing = [name("megatron", b, s) for b in (0, 1, 10, 11) for s in SUBS]
    spec = Spec(n_blocks=12, ranks=2)
    for tensor in ("gradient", "activation"):
        plant(spec, failing, tensor, 3.0)
    run = build_run(spec)
    plan = plan_skips(analyze(run))
    assert set(plan.skip_layers) == set(failing)
    assert plan.skip_layers == tuple(n for n in run.layers if n in set(failing))  # run order


def test_overrides_in_an_edge_block_already_skipped_become_skips() -> None:
    block = [name("megatron", 0, s) for s in SUBS]
    spec = Spec(n_blocks=12)
    for layer in block[:3]:
        plant(plant(spec, [layer], "gradient", 3.0), [layer], "activation", 3.0)
    plant(spec, [block[3]], "gradient", 3.0)  # fc2 alone would be an override
    plan = plan_skips(analyze(build_run(spec)))
    assert set(plan.skip_layers) == set(block) and plan.overrides == ()


def test_overrides_alone_are_not_promoted() -> None:
    block = [name("megatron", 0, s) for s in SUBS]
    plan = plan_skips(analyze(build_run(plant(Spec(n_blocks=12), block, "gradient", 3.0))))
    assert plan.skip_layers == () and {o.layer for o in plan.overrides} == set(block)


def test_existing_bf16_layers_are_kept_but_only_listed_on_request() -> None:
    spec = Spec(family="esm2", n_blocks=12, bf16_blocks=(11, 12))
    boundary = name("esm2", 10, "fc2")
    plant(spec, [boundary], "activation", ramp(8.0, 18.0))
    analysis = analyze(build_run(spec))
    plan = plan_skips(analysis)
    tail = tuple(name("esm2", b, s) for b in (11, 12) for s in FAMILIES["esm2"]["subs"])  # type: ignore[union-attr]
    assert plan.skip_layers == () and plan.kept_bf16 == tail
    assert [(o.layer, o.gemms) for o in plan.overrides] == [(boundary, ("fprop", "wgrad"))]
    assert "boundary effect" in plan.overrides[0].reason
    assert plan_skips(analysis, keep_existing_bf16=True).skip_layers == tail


def test_projected_trends_are_watched_unless_asked_to_skip() -> None:
    layer = name("megatron", 6, "fc1")
    analysis = analyze(
        build_run(plant(Spec(n_blocks=12, n_points=400, noise=0.03), [layer], "gradient", ramp(0.2, 1.6)))
    )
    assert plan_skips(analysis).watch == (layer,)
    eager = plan_skips(analysis, skip_projected=True)
    assert [o.layer for o in eager.overrides] == [layer] and eager.watch == ()


def test_deferred_plan_skips_nothing() -> None:
    every = [name("megatron", b, s) for b in range(10) for s in SUBS]
    analysis = analyze(build_run(plant(Spec(n_blocks=10), every, "gradient", 3.0)))
    plan = plan_skips(analysis, defer=True)
    assert plan.skip_layers == () and plan.overrides == () and len(plan.deferred) == 40
