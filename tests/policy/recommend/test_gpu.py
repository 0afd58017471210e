"""Issue 12 item 2: the GPU named in metadata or a request, under the keys and values users write (`gpu`,
`gpu_arch`, compute capability, product names), decides the recipe; an unrecognised one is said in the rationale."""

from __future__ import annotations

import pytest

from fp8_policy.policy.recommend import RecommendOptions, recommend
from fp8_policy.policy.recommend.gpu import compute_capability, gpu_from
from tests.policy.analysis.factories import FAMILIES, Spec, build_run, name, plant
from tests.policy.recommend.test_recipe import u_shape_spec


@pytest.mark.parametrize(
    ("text", "cap"),
    [
        ("h100", 9.0),
        ("H100", 9.0),
        ("NVIDIA H100 80GB HBM3", 9.0),
        ("H100-SXM5-80GB", 9.0),
        ("H200", 9.0),
        ("h800", 9.0),
        ("GH200", 9.0),
        ("H20", 9.0),
        ("B200", 10.0),
        ("GB200", 10.0),
        ("b100", 10.0),
        ("L40S", 8.9),
        ("l4", 8.9),
        ("A100", 8.0),
        ("A100-SXM4-40GB", 8.0),
        ("a10g", 8.6),
        ("RTX 4090", 8.9),
        ("NVIDIA GeForce RTX 4090", 8.9),
        ("rtx 3090", 8.6),
        ("RTX 5090", 12.0),
        ("RTX 6000 Ada", 8.9),
        ("9.0", 9.0),
        ("8.9", 8.9),
        ("10.0", 10.0),
        ("sm_90", 9.0),
        ("sm90", 9.0),
        ("sm_90a", 9.0),
        ("SM100", 10.0),
        ("sm_120", 12.0),
        ("90", 9.0),
        ("hopper", 9.0),
        ("Blackwell", 10.0),
        ("Ada Lovelace", 8.9),
        ("tpu-v5", None),
        ("gtx 1080", None),
        ("", None),
        ("mi300x", None),
    ],
)
def test_product_names_architectures_and_capabilities(text, cap):
    assert compute_capability(text) == cap


def test_the_first_present_key_wins_and_numbers_are_read_as_text():
    assert gpu_from({"gpu": "B200", "gpu_arch": "hopper"}).capability == 9.0  # gpu_arch first
    assert gpu_from({"compute_capability": 9.0}).capability == 9.0
    assert gpu_from({"hidden_size": 1}) is None


def _rationale(metadata: dict, overrides: dict | None = None) -> str:
    run = build_run(u_shape_spec())
    run.metadata.update(metadata)
    return "\n".join(recommend(run, None, RecommendOptions.from_metadata(run.metadata, overrides)).rationale)


@pytest.mark.parametrize(
    ("metadata", "said"),
    [
        ({"gpu": "h100"}, "gpu 'h100' = compute capability 9"),
        ({"gpu": "B200"}, "gpu 'B200' = compute capability 10"),
        ({"gpu_arch": "sm_90"}, "gpu_arch 'sm_90' = compute capability 9"),
        ({"gpu_name": "NVIDIA GeForce RTX 4090"}, "compute capability 8.9"),
    ],
)
def test_the_documented_gpu_key_is_used(metadata, said):
    text = _rationale(metadata)
    assert said in text and "assumed Hopper" not in text


def test_an_unrecognised_gpu_is_reported_in_the_rationale():
    text = _rationale({"gpu": "tpu-v5"})
    assert "unrecognised GPU 'tpu-v5' (key 'gpu'); unknown GPU: assumed Hopper" in text


def test_gpu_in_a_recompute_request_wins_over_metadata():
    text = _rationale({"gpu": "a100"}, {"gpu": "GB200"})
    assert "gpu 'GB200' = compute capability 10" in text


@pytest.mark.parametrize(("gpu", "recipe"), [("B200", "mxfp8"), ("H100", "block"), ("sm_90", "block")])
def test_the_gpu_decides_the_finer_recipe_of_a_uniform_run(gpu, recipe):
    spec = Spec(n_blocks=8)
    plant(spec, [name("megatron", b, s) for b in range(8) for s in FAMILIES["megatron"]["subs"]], "gradient", 4.0)
    run = build_run(spec)
    result = recommend(run, None, RecommendOptions.from_metadata({"gpu": gpu, "recipe": "delayed"}))
    assert result.decision.recipe.name == recipe


@pytest.mark.parametrize("value", [True, [], {"x": 1}, "  "])
def test_a_gpu_override_that_is_not_text_is_a_clear_error(value):
    with pytest.raises(ValueError, match="'gpu' must be a non-empty string"):
        RecommendOptions.from_metadata({}, {"gpu": value})
