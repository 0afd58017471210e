"""Issue 12 item 7: the side-by-side compare heatmap stays readable on a 1440 px wide page — panels with the same
rows share one set of row labels, and the figure is narrow enough that a page scaling it to fit keeps the text
at a readable pixel size."""

from __future__ import annotations

import pytest

from fp8_policy.policy.heatmap import plan_geometry
from tests.support.images import SVG_NS, svg_tree

PAGE_PX = 1440 - 80  # the image's box on a 1440 px wide page (margins)
MIN_TEXT_PX = 9.0


def shown_px(font_pt: float, dpi: int, image_px: int) -> float:
    """Height in page pixels of `font_pt` text once the page scales the image into PAGE_PX."""
    return font_pt / 72.0 * dpi * min(1.0, PAGE_PX / image_px)


@pytest.mark.parametrize("rows", [25, 60, 140, 200])  # beyond ~220 rows the height cap, not the width, sets the font
def test_compare_geometry_keeps_row_labels_readable_at_1440_px(rows):
    shared = plan_geometry(rows, 16, panels=2, shared_rows=True)
    assert shown_px(shared.row_font, shared.dpi, shared.pixels[0]) >= MIN_TEXT_PX
    unshared = plan_geometry(rows, 16, panels=2)
    assert shared.pixels[0] < unshared.pixels[0]  # one set of labels saves the second panel's label column
    assert shared.heat[1].width == pytest.approx(shared.heat[0].width)


def test_the_second_panel_reuses_the_first_panels_labels(visual_client, planted):
    root = svg_tree(visual_client.get(f"/api/v1/compare.svg?base={planted.before}&head={planted.after}").content)
    texts = ["".join(el.itertext()) for el in root.iter(f"{SVG_NS}text")]
    assert texts.count("BODY") == 1  # group label drawn once, left of the base panel
    labels = [t for t in texts if t.endswith(" qkv") and t.split(" ")[0].isdigit()]
    assert labels and len(labels) == len(set(labels))  # each block's row label once, not once per panel
