"""Recipe decisions: what-if switches gated by hardware, uniform → recipe change, delayed-scaling rules."""

from __future__ import annotations

import pytest

from fp8_policy.policy.analysis.recipes import normalize_recipe
from fp8_policy.policy.recommend import RecommendOptions, recommend
from fp8_policy.policy.recommend.recipe import compute_capability
from tests.policy.analysis.factories import FAMILIES, Spec, build_run, heads, name, plant

SUBS = tuple(FAMILIES["megatron"]["subs"])  # type: ignore[arg-type]


def u_shape_spec(**kwargs: object) -> Spec:
    spec = Spec(n_blocks=12, **kwargs)  # type: ignore[arg-type]
    failing = [name("megatron", b, s) for b in (0, 11) for s in SUBS]
    for tensor in ("gradient", "activation"):
        plant(spec, failing, tensor, 3.0)
    return spec


def rec(spec: Spec, **overrides: object):
    run = build_run(spec)
    return recommend(run, None, RecommendOptions.from_metadata(run.metadata, overrides))


@pytest.mark.parametrize(
    ("arch", "cap"),
    [
        ("hopper", 9.0),
        ("H100", 9.0),
        ("h200-sxm", 9.0),
        ("sm90", 9.0),
        ("sm_90a", 9.0),
        ("sm100", 10.0),
        ("Blackwell", 10.0),
        ("B300", 10.3),  # B300 is sm_103
        ("ampere", 8.0),
        ("A100", 8.0),
        ("sm89", 8.9),
        ("9.0", 9.0),
        ("tpu", None),
        (None, None),
    ],
)
def test_compute_capability(arch: str | None, cap: float | None) -> None:
    assert compute_capability(arch) == cap


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("DelayedScaling", "delayed"),
        ("transformer_engine.common.recipe.Float8CurrentScaling", "current"),
        ("tensorwise", "current"),
        ("blockwise", "block"),
        ("MXFP8BlockScaling", "mxfp8"),
        ("fp8_block_scaling", "block"),
        ("nvfp4", "nvfp4"),
        ("transformer_engine.common.recipe.NVFP4BlockScaling", "nvfp4"),
        ("nvfp4_block", None),
        ("", None),
        (None, None),
    ],
)
def test_normalize_recipe(text: str | None, expected: str | None) -> None:
    assert normalize_recipe(text) == expected


def test_delayed_with_overflow_switches_to_current_scaling() -> None:
    spec = Spec(n_blocks=8, overflow={name("megatron", 2, "fc1"): 0.8})
    result = rec(spec, current_recipe="DelayedScaling", gpu_arch="hopper")
    recipe = result.decision.recipe
    assert recipe.name == "current"
    assert recipe.class_path == "transformer_engine.common.recipe.Float8CurrentScaling"
    assert recipe.kwargs == {"fp8_format": "HYBRID"}
    assert "overflow under delayed scaling" in recipe.reason
    assert result.decision.skip_layers == ()


def test_delayed_with_scale_instability_switches_to_current_scaling() -> None:
    scale = [0.0004] * 20 + [0.0080] * 20 + [0.0004] * 20
    spec = Spec(n_blocks=8, scale_curves={(name("megatron", 3, "qkv"), "activation"): scale})
    recipe = rec(spec, current_recipe="delayed").decision.recipe
    assert recipe.name == "current" and "scale_instability" in recipe.reason


def test_healthy_delayed_run_keeps_delayed_with_te_kwargs() -> None:
    recipe = rec(Spec(n_blocks=8), current_recipe="delayed", gpu_arch="hopper").decision.recipe
    assert recipe.name == "delayed"
    assert recipe.kwargs == {"fp8_format": "HYBRID", "amax_history_len": 1024, "amax_compute_algo": "max"}
    assert recipe.reason.startswith("keep delayed")


def test_blackwell_with_low_mxfp8_whatif_switches_to_mxfp8_and_needs_no_skips() -> None:
    result = rec(u_shape_spec(whatif={"mxfp8": 0.1}), current_recipe="delayed", gpu_arch="blackwell")
    recipe = result.decision.recipe
    assert recipe.name == "mxfp8" and recipe.kwargs == {"fp8_format": "E4M3"}
    assert "mxfp8_underflows%" in recipe.reason and "leaves 0 of" in recipe.reason
    assert result.decision.skip_layers == () and result.decision.gemm_overrides == ()


def test_hopper_cannot_switch_to_mxfp8_and_skips_instead() -> None:
    result = rec(u_shape_spec(whatif={"mxfp8": 0.1}), current_recipe="delayed", gpu_arch="hopper")
    # delayed + BF16 layers used to switch to current on a Megatron-only rule; no logged evidence favours it
    assert result.decision.recipe.name == "delayed"
    assert len(result.decision.skip_layers) == 8


def test_whatif_that_is_not_much_lower_does_not_switch() -> None:
    result = rec(u_shape_spec(whatif={"fp8_block_scaling": 0.9}), current_recipe="current", gpu_arch="hopper")
    assert result.decision.recipe.name == "current" and len(result.decision.skip_layers) == 8


def test_unknown_gpu_is_inferred_from_logged_whatif_stats() -> None:
    result = rec(u_shape_spec(whatif={"mxfp8": 0.1}), current_recipe="current")
    assert result.decision.recipe.name == "mxfp8"
    assert any("inferred from logged mxfp8_*" in line for line in result.rationale)


def test_uniform_changes_the_recipe_instead_of_a_huge_skip_list() -> None:
    every = [name("megatron", b, s) for b in range(10) for s in SUBS]
    spec = plant(plant(Spec(n_blocks=10), every, "gradient", 3.0), every, "activation", 3.0)
    result = rec(spec, current_recipe="delayed", gpu_arch="hopper")
    assert result.decision.recipe.name == "block"
    assert result.decision.recipe.kwargs == {"fp8_format": "E4M3"}
    assert result.decision.skip_layers == () and result.decision.gemm_overrides == ()
    assert "instead of a skip list" in result.decision.recipe.reason
    assert any("re-run" in line for line in result.rationale)


def test_delayed_with_block_skips_keeps_delayed_and_only_the_megatron_path_switches() -> None:
    # The TE debug YAML's DisableFP8Layer / DisableFP8GEMM work with delayed scaling; only Megatron's
    # --first-last-layers-bf16 cannot: the recipe is kept (no logged evidence for another one) and the Megatron
    # section alone uses tensorwise, saying why.
    result = rec(u_shape_spec(), current_recipe="delayed", gpu_arch="hopper")
    recipe = result.decision.recipe
    body = result.to_dict()["recipe"]
    assert recipe.name == "delayed" and "through the TE debug YAML" in recipe.reason
    assert body["evidence"] == "none: recipe kept" and body["changed_from"] is None
    assert body["apply_paths"]["te-yaml"].startswith("works") and "tensorwise" in body["apply_paths"]["megatron"]
    assert result.megatron["first_last_layers_bf16"] is True and result.megatron["fp8_recipe"] == "tensorwise"
    assert "--fp8-amax-history-len" not in result.megatron["extra_args"]
    assert any(note.startswith("Megatron path only: --fp8-recipe tensorwise") for note in result.megatron["notes"])


def test_current_scaling_with_skips_stays_current() -> None:
    result = rec(u_shape_spec(), current_recipe="tensorwise", gpu_arch="hopper")
    assert result.decision.recipe.name == "current" and result.decision.recipe.reason.startswith("keep current")


def test_head_only_skip_keeps_delayed() -> None:
    spec = plant(plant(Spec(n_blocks=8), heads("megatron"), "gradient", 6.0), heads("megatron"), "activation", 3.0)
    result = rec(spec, current_recipe="delayed", gpu_arch="hopper")
    assert result.decision.skip_layers == tuple(heads("megatron")) and result.decision.recipe.name == "delayed"


def test_ampere_cannot_run_fp8() -> None:
    result = rec(Spec(n_blocks=4), current_recipe="delayed", gpu_arch="ampere")
    assert result.decision.recipe.name == "delayed"
    assert any("cannot run FP8" in line for line in result.rationale)


def test_delayed_with_only_gemm_overrides_in_blocks_keeps_delayed_but_megatron_switches() -> None:
    # Gradient-only failures become dgrad+wgrad overrides, not skips; Megatron can only keep the whole module in
    # BF16, which it rejects under delayed scaling, so the recipe must not stay delayed.
    spec = Spec(n_blocks=12, metadata={"recipe": "DelayedScaling"})
    plant(spec, [name("megatron", b, s) for b in (0, 11) for s in SUBS], "gradient", 3.0)
    result = rec(spec)
    assert result.decision.skip_layers == () and len(result.decision.gemm_overrides) == 8
    assert result.decision.recipe.name == "delayed"  # the YAML's DisableFP8GEMM works under delayed scaling
    assert "8 with GEMM overrides" in result.to_dict()["recipe"]["apply_paths"]["megatron"]
    assert result.megatron["fp8_recipe"] == "tensorwise"
