"""recipe_from_policy against the TE stand-in (tests/client/apply/fake_te.py mirrors TE's recipe signatures)."""

from __future__ import annotations

import pytest

from fp8_policy.client.apply import recipe_from_policy
from fp8_policy.client.apply.te import TE_MISSING
from tests.client.apply import fake_te

CURRENT = {
    "name": "current",
    "class": "transformer_engine.common.recipe.Float8CurrentScaling",
    "kwargs": {"fp8_format": "HYBRID"},
    "reason": "r",
}


def test_current_scaling_with_hybrid_format(fake_te_29) -> None:
    recipe = recipe_from_policy({"fp8_skip_layers": [], "recipe": CURRENT})
    assert type(recipe) is fake_te.Float8CurrentScaling and recipe.fp8_format is fake_te.Format.HYBRID


@pytest.mark.parametrize(
    ("recipe", "cls", "fmt"),
    [
        (
            {
                "name": "delayed",
                "kwargs": {"fp8_format": "HYBRID", "amax_history_len": 1024, "amax_compute_algo": "max"},
            },
            fake_te.DelayedScaling,
            "HYBRID",
        ),
        ({"name": "block", "kwargs": {"fp8_format": "E4M3"}}, fake_te.Float8BlockScaling, "E4M3"),
        ({"name": "mxfp8", "kwargs": {"fp8_format": "Format.E4M3"}}, fake_te.MXFP8BlockScaling, "E4M3"),
        (
            {"class": "transformer_engine.common.recipe.Float8CurrentScaling", "kwargs": {"fp8_format": "e4m3"}},
            fake_te.Float8CurrentScaling,
            "E4M3",
        ),
    ],
    ids=["delayed", "block", "mxfp8", "class-only"],
)
def test_each_recipe_maps_to_its_class(fake_te_29, recipe, cls, fmt) -> None:
    built = recipe_from_policy({"recipe": recipe})
    assert type(built) is cls and built.fp8_format is fake_te.Format[fmt]


def test_delayed_kwargs_pass_through(fake_te_29) -> None:
    built = recipe_from_policy({"name": "delayed", "kwargs": {"amax_history_len": 16, "margin": 1}})
    assert (built.amax_history_len, built.margin, built.fp8_format) == (16, 1, fake_te.Format.HYBRID)


def test_mm_params_dict_is_converted(fake_te_29) -> None:
    built = recipe_from_policy({"name": "current", "kwargs": {"fp8_gemm_fprop": {"use_split_accumulator": True}}})
    assert built.fp8_gemm_fprop == fake_te.MMParams(use_split_accumulator=True)


def test_unknown_kwarg_is_a_type_error_naming_the_key(fake_te_29) -> None:
    # TE's pydantic dataclasses would silently drop it; the stand-in does the same, so we must catch it.
    assert not hasattr(fake_te.Float8CurrentScaling(amax_history_len=5), "amax_history_len")
    with pytest.raises(TypeError, match="Float8CurrentScaling has no parameter 'amax_history_len'"):
        recipe_from_policy({"recipe": {**CURRENT, "kwargs": {"amax_history_len": 5}}})


def test_unannotated_class_attribute_is_not_a_kwarg(fake_te_29) -> None:
    with pytest.raises(TypeError, match="'fp8_quant_fwd_inp'"):
        recipe_from_policy({"name": "block", "kwargs": {"fp8_quant_fwd_inp": None}})


@pytest.mark.parametrize(
    ("recipe", "message"),
    [
        ({"name": "current", "kwargs": {"fp8_format": "E3M4"}}, "unknown fp8_format 'E3M4'; expected one of E2M1"),
        ({"name": "tensorwise"}, "unknown recipe name 'tensorwise'"),
        ({"name": "block", "class": "transformer_engine.common.recipe.DelayedScaling"}, "means Float8BlockScaling"),
        ({"class": "torchao.float8.Float8LinearConfig"}, "not a transformer_engine recipe"),
        ({"class": "transformer_engine.common.recipe.CustomRecipe"}, "is not one of"),
        ({"kwargs": {}}, "the policy has no recipe"),
    ],
)
def test_bad_recipes_are_value_errors(fake_te_29, recipe, message) -> None:
    with pytest.raises(ValueError, match=message):
        recipe_from_policy({"recipe": recipe})


def test_te_post_init_assertions_surface_as_pydantic_value_errors(fake_te_29) -> None:
    with pytest.raises(ValueError, match="Pure E5M2"):  # pydantic wraps the assert in a ValidationError
        recipe_from_policy({"name": "delayed", "kwargs": {"fp8_format": "E5M2"}})


def test_missing_te_is_an_import_error_with_install_hint(no_te) -> None:
    with pytest.raises(ImportError, match=r"transformer_engine is not installed: pip install 'fp8-policy\[te\]'"):
        recipe_from_policy({"recipe": CURRENT})
    assert TE_MISSING.endswith("on a CUDA machine")
