"""policy/run_facets.py: which metadata key names each facet, and the one spelling two values compare in."""

from __future__ import annotations

import pytest

from fp8_policy.policy.recommend.gpu import gpu_key
from fp8_policy.policy.run_facets import MAX_FACET_CHARS, facet_key, run_facets


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("H100", "h100"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("h100-sxm", "h100"),
        ("NVIDIA B200", "b200"),
        ("Hopper", "hopper"),
        ("sm_90", "sm90"),
        ("9.0", "sm90"),
        ("RTX 4090", "rtx4090"),
        ("NVIDIA Foo-X", "foo x"),
        ("  ", None),
        (None, None),
    ],
)
def test_gpu_key_spells_one_product_one_way(text: str | None, key: str | None) -> None:
    assert gpu_key(text) == key


def test_h100_and_h200_stay_apart() -> None:
    assert gpu_key("H200 141GB") == "h200" != gpu_key("H100")


@pytest.mark.parametrize(
    ("facet", "text", "key"),
    [
        ("recipe", "MXFP8BlockScaling", "mxfp8"),
        ("recipe", "transformer_engine.common.recipe.DelayedScaling", "delayed"),
        ("recipe", "BF16", "bf16"),  # not a TE recipe: kept, lowercased, so a filter still finds it
        ("te_version", "v2.8.0+cu128", "2.8.0+cu128"),
        ("git_commit", "3F2A9C1", "3f2a9c1"),
        ("gpu", "x" * 300, "x" * MAX_FACET_CHARS),
    ],
)
def test_facet_key(facet: str, text: str, key: str) -> None:
    assert facet_key(facet, text) == key


def test_unknown_facet_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown facet"):
        facet_key("model", "llama")


def test_run_facets_reads_the_first_key_present_and_skips_objects_and_booleans() -> None:
    metadata = {
        "gpu": {"name": "H100"},
        "gpu_name": "NVIDIA B200",
        "fp8_recipe": "Float8CurrentScaling",
        "te_version": True,
        "commit": "ABCDEF0123",
    }

    assert run_facets(metadata) == {"gpu": "b200", "recipe": "current", "te_version": None, "git_commit": "abcdef0123"}
    assert run_facets({}) == dict.fromkeys(("gpu", "recipe", "te_version", "git_commit"))
