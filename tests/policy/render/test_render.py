"""The `render` entry point: formats, dispatch, result records, and every family in every dialect."""

from __future__ import annotations

import pytest

from fp8_policy.policy.render import FORMATS, RenderedPolicy, RenderOptions, render
from tests.policy.render import factory as f

EXPECTED = {
    "te-yaml": ("application/yaml", "fp8_debug_config.yaml"),
    "megatron": ("text/x-shellscript", "megatron_fp8_policy.sh"),
    "hydra": ("text/plain", "bionemo_fp8_overrides.txt"),
    "torchao": ("text/x-python", "torchao_fp8_filter.py"),
    "te-recipe": ("text/x-python", "fp8_policy_recipe.py"),
    "torchtitan": ("text/x-python", "torchtitan_converters.py"),
}


def test_formats():
    assert FORMATS == ("te-yaml", "megatron", "hydra", "torchao", "te-recipe", "torchtitan")


def test_unknown_format():
    with pytest.raises(ValueError, match="unknown policy format"):
        render(f.decision(f.family_layers("llama", 1)), "deepspeed")


@pytest.mark.parametrize("family", sorted(f.FAMILIES))
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_family_renders_in_every_format(family, fmt):
    layers = f.family_layers(family, 4)
    _, _, heads = f.FAMILIES[family]
    first = 0 if family == "hf" else 1
    decision = f.decision(
        layers, (*f.block_names(family, first), heads[0]), [f.override(layers[-2].name, "wgrad")], te_version="2.13"
    )
    result = render(decision, fmt, RenderOptions())
    assert isinstance(result, RenderedPolicy)
    assert (result.media_type, result.filename) == EXPECTED[fmt]
    assert result.content.endswith("\n") and "fp8-policy" in result.content
