"""GET /api/v1/compare and /api/v1/compare.{png,svg} on a before/after pair: lm_head moved to BF16 and the body's
gradient underflow dropped from 1.2 % to 0.8 %."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.images import cell_rgb, luminance, png_pixels, shapes, svg_text, svg_tree, top_colour
from tests.support.planted_pair import HEAD


def test_heatmap_compare_json_reports_precision_and_group_changes(visual_client, planted):
    response = visual_client.get(f"/api/v1/compare?base={planted.before}&head={planted.after}")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["base"] == {"id": planted.before, "name": "before"}
    assert body["precision_changes"] == [{"layer": HEAD, "group": "head", "base": "fp8", "head": "bf16"}]
    head_layer = next(layer for layer in body["layers"] if layer["name"] == HEAD)
    assert head_layer["precision"] == {"base": "fp8", "head": "high"} and head_layer["in"] == "both"
    level = head_layer["stats"]["gradient"]["level"]
    assert level["base"] > 6.0 and level["head"] is None
    groups = {group["group"]: group for group in body["groups"]}
    gradient = groups["body"]["stats"]["gradient"]
    assert gradient["relative"] == pytest.approx(-1 / 3, abs=0.03) and gradient["layers"] == 24
    assert gradient["base"] == pytest.approx(1.2, abs=0.05) and gradient["head"] == pytest.approx(0.8, abs=0.05)
    assert groups["head"]["moved_to_bf16"] == [HEAD]
    block = next(layer for layer in body["layers"] if layer["group"] == "body")
    assert block["stats"]["gradient"]["mean"]["relative"] < 0
    assert "head_only" in {f["pattern"] for f in body["findings_disappeared"]}
    assert "head_only" not in {f["pattern"] for f in body["findings_appeared"]}
    assert body["unmatched"] == {"only_in_base": [], "only_in_head": []}
    sentence = next(s for s in body["summary"] if s.startswith("body gradient underflow"))
    assert "−33%" in sentence and "after head moved to BF16" in sentence and "→" in sentence


def test_heatmap_compare_png_is_two_panels_on_one_scale(visual_client, planted):
    single = visual_client.get(f"/api/v1/runs/{planted.before}/heatmap.png")
    response = visual_client.get(f"/api/v1/compare.png?base={planted.before}&head={planted.after}")
    assert response.status_code == 200, response.text
    pixels = png_pixels(response.content)
    assert single.status_code == 200 and pixels.shape[1] <= 2000  # readable on a 1440 px page (issue 12 item 7)
    assert response.headers["x-heatmap-vmax"] == "6"
    assert shapes(response.headers) == [(25, 21), (25, 21)]
    hot = cell_rgb(pixels, response.headers, 24, 10, panel=0)
    np.testing.assert_allclose(hot, top_colour(), atol=0.02)
    assert luminance(cell_rgb(pixels, response.headers, 24, 2, panel=1, window=4)) > 0.8  # BF16 in "after"
    body_before, body_after = (cell_rgb(pixels, response.headers, 0, 10, panel=p) for p in (0, 1))
    assert luminance(body_after) > luminance(body_before)  # 0.8 % is lighter than 1.2 % on the shared scale
    svg = svg_text(
        svg_tree(visual_client.get(f"/api/v1/compare.svg?base={planted.before}&head={planted.after}&vmax=8").content)
    )
    assert "base · before" in svg and "head · after" in svg and "not in FP8" in svg and "capped at 8%" in svg


@pytest.mark.parametrize(
    ("query", "status", "error"),
    [
        ("base=1", 400, "InvalidParameter"),
        ("base=abc&head=1", 400, "InvalidParameter"),
        ("base=99999999&head=99999998", 404, "NotFound"),
        ("base=1&head=2&bogus=1", 400, "UnknownParameter"),
        ("base=1&head=2&critical=9", 400, "InvalidThresholds"),
    ],
)
def test_heatmap_compare_bad_parameters(visual_client, planted, query, status, error):
    for path in ("/api/v1/compare", "/api/v1/compare.png"):
        response = visual_client.get(f"{path}?{query}")
        assert response.status_code == status, response.text
        assert response.json()["error"] == error
