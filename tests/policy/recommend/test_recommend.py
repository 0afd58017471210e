"""recommend(): JSON shape, options, re-analysis, rationale numbers and confidence."""

from __future__ import annotations

import json

import pytest

from fp8_policy.policy.analysis import Thresholds, analyze
from fp8_policy.policy.recommend import POLICY_VERSION, ModelDims, RecommendOptions, recommend
from tests.policy.analysis.factories import FAMILIES, Spec, build_run, name, plant, ramp

KEYS = {
    "fp8_skip_layers",
    "gemm_overrides",
    "kept_bf16",
    "headline",
    "precision_ladder",
    "fp8_param",
    "recipe",
    "megatron",
    "expected_cost",
    "rationale",
    "confidence",
    "policy_version",
    "findings",
    "formats",
    "history",
    "parallel",
    "schedule",
    "frontier",  # recommend/frontier.py: the speed/risk frontier and the rules on it
}
SUBS = tuple(FAMILIES["megatron"]["subs"])  # type: ignore[arg-type]


def u_shape_run(**kwargs: object):
    spec = Spec(n_blocks=12, **kwargs)  # type: ignore[arg-type]
    failing = [name("megatron", b, s) for b in (0, 11) for s in SUBS]
    for tensor in ("gradient", "activation"):
        plant(spec, failing, tensor, 3.0)
    return build_run(spec)


def test_to_dict_has_exactly_the_api_keys_and_is_json() -> None:
    result = recommend(u_shape_run(), None, RecommendOptions(gpu_arch="hopper"))
    data = json.loads(json.dumps(result.to_dict()))
    assert set(data) == KEYS
    assert set(data["recipe"]) == {
        "name",
        "label",
        "class",
        "kwargs",
        "reason",
        "evidence",
        "current",
        "changed_from",
        "apply_paths",
    }
    assert data["policy_version"] == POLICY_VERSION
    assert {
        "first_last_layers_bf16",
        "num_layers_at_start_in_bf16",
        "num_layers_at_end_in_bf16",
        "fp8_recipe",
        "extra_args",
    } <= set(data["megatron"])
    assert 0.0 < data["confidence"] <= 1.0
    assert data["findings"][0]["pattern"] == "u_shape"
    assert len(data["fp8_skip_layers"]) == 8


def test_decision_carries_every_layer_and_the_te_version() -> None:
    run = u_shape_run(metadata={"te_version": "2.13"})
    result = recommend(run)
    assert result.decision.layers == tuple(run.layers.values())
    assert result.decision.te_version == "2.13"
    assert recommend(run, None, RecommendOptions(te_version="2.20")).decision.te_version == "2.20"


def test_gemm_override_json_shape() -> None:
    layer = name("megatron", 5, "fc2")
    result = recommend(build_run(plant(Spec(n_blocks=12), [layer], "activation", 5.0)))
    assert result.to_dict()["gemm_overrides"] == [
        {"layer": layer, "gemms": ["fprop", "wgrad"], "reason": result.decision.gemm_overrides[0].reason}
    ]


def test_healthy_run_changes_nothing() -> None:
    result = recommend(build_run(Spec(n_blocks=8)), None, RecommendOptions(current_recipe="current"))
    assert result.decision.skip_layers == () and result.decision.gemm_overrides == ()
    assert result.expected_cost["bf16_gemm_share"] == 0.0
    assert any("nothing to skip" in line for line in result.rationale)


def test_threshold_override_is_recomputed_from_the_stored_data() -> None:
    run = u_shape_run(noise=0.05)
    analysis = analyze(run)  # default thresholds
    relaxed = RecommendOptions.from_metadata(run.metadata, {"thresholds": {"critical": 5.0, "severe": 8.0}})
    result = recommend(run, analysis, relaxed)
    # relaxed: no layer is critical; the 8 planted layers are in the warning band (a `warning_band` finding)
    assert result.decision.skip_layers == () and {f.pattern.value for f in result.findings} == {"warning_band"}
    assert len(recommend(run, analysis, RecommendOptions()).decision.skip_layers) == 8


def test_rationale_sentences_carry_the_numbers() -> None:
    opts = RecommendOptions.from_metadata(
        {},
        {
            "hidden_size": 1024,
            "ffn_hidden_size": 4096,
            "vocab_size": 32000,
            "gpu_arch": "H100",
            "current_recipe": "delayed",
        },
    )
    text = "\n".join(recommend(u_shape_run(), None, opts).rationale)
    assert "Skip 8 layer(s) to BF16" in text and "gradient 3." in text
    # the recipe stays delayed (no evidence for a switch): delayed's GEMM speedup, tensorwise for Megatron only
    assert "Expected cost: GEMM FLOPs 0.0% FP4 / " in text and "(1.69x, H200)" in text
    assert (
        "Megatron: --first-last-layers-bf16 with 1 layer(s) at the start and 1 at the end, --fp8-recipe tensorwise"
        in text
    )
    assert "Confidence" in text


def test_boundary_rationale_mentions_the_boundary() -> None:
    spec = Spec(family="esm2", n_blocks=12, bf16_blocks=(11, 12))
    plant(spec, [name("esm2", 10, "fc2")], "activation", ramp(8.0, 18.0))
    result = recommend(build_run(spec), None, RecommendOptions(current_recipe="current"))
    assert any(
        line.startswith("Boundary effect at") and "do not answer it with more BF16 blocks" in line
        for line in result.rationale
    )
    assert result.megatron["first_last_layers_bf16"] is True and result.megatron["num_layers_at_end_in_bf16"] == 2
    assert "boundary" in result.decision.gemm_overrides[0].reason


def test_confidence_drops_with_few_points_single_rank_and_unknown_gpu() -> None:
    rich = recommend(
        build_run(Spec(n_blocks=8, ranks=4, n_points=200)),
        None,
        RecommendOptions(gpu_arch="hopper", current_recipe="current"),
    )
    poor = recommend(build_run(Spec(n_blocks=8, ranks=1, n_points=5)), None, RecommendOptions())
    assert rich.confidence == 1.0
    assert poor.confidence < 0.6
    assert any("post-warm-up points" in line for line in poor.rationale)


def test_recommend_passes_num_layers_to_the_analysis() -> None:
    run = build_run(Spec(n_blocks=10, with_heads=False))
    options = RecommendOptions.from_metadata(run.metadata, {"num_layers": 12})
    result = recommend(run, analyze(run), options)
    assert result.megatron["num_layers_at_end_in_bf16"] == 0  # blocks 10-11 unknown (plans exist), not BF16


def test_options_from_metadata_and_overrides() -> None:
    options = RecommendOptions.from_metadata(
        {"hidden_size": 4096, "recipe": "Float8BlockScaling", "num_layers": "many", "gpu_arch": "sm90"},
        {"model_dims": {"ffn_hidden_size": 14336, "num_key_value_heads": 8}, "thresholds": {"critical": 3}},
    )
    assert options.dims == ModelDims(hidden_size=4096, ffn_hidden_size=14336, num_query_groups=8)  # "many" skipped
    assert options.current_recipe == "block" and options.gpu_arch == "sm90"
    assert options.thresholds == Thresholds(critical=3.0)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"gpu_type": "hopper"}, "unknown option(s) 'gpu_type'"),
        ({"hidden_size": -1}, "model dimension 'hidden_size' must be a positive integer"),
        ({"recipe": "fp4"}, "unknown FP8 recipe 'fp4'"),
        ({"thresholds": {"critical": 0.1}}, "warning < critical < severe"),
        ({"skip_projected": "yes"}, "'skip_projected' must be true or false"),
        ({"model_dims": [1]}, "'model_dims' must be an object"),
    ],
)
def test_bad_overrides_raise_value_errors(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as error:
        RecommendOptions.from_metadata({}, overrides)
    assert message in str(error.value)
