"""policy/vocabulary.py names the policy formats and their media types for the routes' documentation, apart from
the render package: they must stay what policy/render/ really renders. The renderers' tables are keyed by the
vocabulary's lists (a format's module is the one named like it), so a format without its module fails at import."""

from __future__ import annotations

import pytest

from fp8_policy.policy import render, vocabulary
from fp8_policy.policy.render import hydra, te_yaml


def test_the_vocabulary_names_the_formats_render_takes_in_its_order() -> None:
    assert vocabulary.FORMATS == render.FORMATS == tuple(render.DIALECTS)
    assert tuple(render.MONITORS) == vocabulary.MONITORS
    assert vocabulary.OUTPUT_FORMATS == render.OUTPUT_FORMATS


def test_each_format_s_media_type_is_the_one_its_rendering_carries() -> None:
    modules = {**render.DIALECTS, **render.MONITORS}
    assert set(vocabulary.MEDIA_TYPES) == set(modules)
    for fmt, module in modules.items():
        assert vocabulary.MEDIA_TYPES[fmt] == module.MEDIA_TYPE


def test_a_format_and_its_module_are_paired_by_name_and_a_mismatch_fails() -> None:
    assert render._by_format(("te-yaml", "hydra"), (hydra, te_yaml)) == {"te-yaml": te_yaml, "hydra": hydra}
    with pytest.raises(ImportError, match="te-recipe"):
        render._by_format(("te-yaml", "te-recipe"), (te_yaml,))  # a format the vocabulary names, no module for it
    with pytest.raises(ImportError, match="hydra"):
        render._by_format(("te-yaml",), (te_yaml, hydra))  # a renderer no format names
