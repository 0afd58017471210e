"""policy/vocabulary.py names the policy formats and their media types for the routes' documentation, apart from
the render package: they must stay what policy/render/ really renders."""

from __future__ import annotations

from fp8_policy.policy import render, vocabulary


def test_the_vocabulary_names_the_formats_render_takes_in_its_order() -> None:
    assert vocabulary.FORMATS == render.FORMATS == tuple(render.DIALECTS)
    assert tuple(render.MONITORS) == vocabulary.MONITORS
    assert vocabulary.OUTPUT_FORMATS == render.OUTPUT_FORMATS


def test_each_format_s_media_type_is_the_one_its_rendering_carries() -> None:
    modules = {**render.DIALECTS, **render.MONITORS}
    assert set(vocabulary.MEDIA_TYPES) == set(modules)
    for fmt, module in modules.items():
        assert vocabulary.MEDIA_TYPES[fmt] == module.MEDIA_TYPE
