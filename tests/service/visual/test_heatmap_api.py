"""GET /api/v1/runs/{id}/heatmap.{png,svg,json}: decodable images of the right size, colours at known cells of a
planted run, group labels, "not in FP8" rows, boxes, skip markers, and 400/404/409 error bodies."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from sqlalchemy.orm import Session

from fp8_policy.db.runs import NewRun, RunRepository
from tests.support.images import (
    cell_rgb,
    luminance,
    png_pixels,
    shapes,
    svg_ids,
    svg_text,
    svg_tree,
    top_colour,
)
from tests.support.planted_pair import HEAD


def rows_of(client, run_id: int, query: str = "") -> list[dict]:
    response = client.get(f"/api/v1/runs/{run_id}/heatmap.json{query}")
    assert response.status_code == 200, response.text
    return response.json()["rows"]


def test_heatmap_png_decodes_at_the_requested_size(visual_client, planted):
    response = visual_client.get(f"/api/v1/runs/{planted.before}/heatmap.png?dpi=80&width=11&height=6.5")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "image/png"
    pixels = png_pixels(response.content)
    assert pixels.shape[:2] == (520, 880)
    assert response.headers["x-heatmap-size"] == "880,520"
    default = visual_client.get(f"/api/v1/runs/{planted.before}/heatmap.png")
    width, height = map(int, default.headers["x-heatmap-size"].split(","))
    assert png_pixels(default.content).shape[:2] == (height, width)
    assert shapes(default.headers) == [(25, 21)]  # 6 blocks x 4 GEMMs + lm_head, iterations 0..200 every 10


def test_heatmap_hot_cell_is_darker_and_at_the_top_of_the_scale(visual_client, planted):
    rows = rows_of(visual_client, planted.before)
    hot, healthy = rows.index(next(r for r in rows if r["layer"] == HEAD)), 0
    response = visual_client.get(f"/api/v1/runs/{planted.before}/heatmap.png")
    pixels = png_pixels(response.content)
    hot_rgb, healthy_rgb = (cell_rgb(pixels, response.headers, row, 10) for row in (hot, healthy))
    np.testing.assert_allclose(hot_rgb, top_colour(), atol=0.02)  # 6-10 % with the scale capped at 6 %
    assert luminance(hot_rgb) < 0.3 < 0.7 < luminance(healthy_rgb)
    assert rows[hot]["boxed"] and not rows[healthy]["boxed"]
    wider = visual_client.get(f"/api/v1/runs/{planted.before}/heatmap.png?vmax=20")
    assert wider.headers["x-heatmap-vmax"] == "20"
    assert luminance(cell_rgb(png_pixels(wider.content), wider.headers, hot, 10)) > luminance(hot_rgb) + 0.1


def test_heatmap_svg_has_group_labels_boxes_and_skip_markers(visual_client, planted):
    response = visual_client.get(f"/api/v1/runs/{planted.before}/heatmap.svg?mark_iteration=100")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("image/svg+xml")
    root = svg_tree(response.content)
    text = svg_text(root)
    assert "BODY" in text and "HEAD" in text and "iteration 100" in text
    assert len(svg_ids(root, "critical-box-")) == 1  # only lm_head is at or above 2 %
    assert svg_ids(root, "iteration-mark")
    skip = set(visual_client.get(f"/api/v1/runs/{planted.before}/recommendation").json()["fp8_skip_layers"])
    assert skip == {HEAD}
    assert len(svg_ids(root, "skip-marker-")) == len(skip)
    assert [r["layer"] for r in rows_of(visual_client, planted.before) if r["skip"]] == [HEAD]
    hidden = svg_tree(visual_client.get(f"/api/v1/runs/{planted.before}/heatmap.svg?show_skip=false").content)
    assert not svg_ids(hidden, "skip-marker-")


def test_heatmap_draws_bf16_layers_as_not_in_fp8_rows(visual_client, planted):
    root = svg_tree(visual_client.get(f"/api/v1/runs/{planted.after}/heatmap.svg").content)
    assert "not in FP8" in svg_text(root) and "HEAD" in svg_text(root)
    assert svg_ids(root, "bf16-rows-") and not svg_ids(root, "critical-box-")
    rows = rows_of(visual_client, planted.after)
    assert rows[-1] == {**rows[-1], "layer": HEAD, "kind": "bf16", "precision": "high", "level": None}
    response = visual_client.get(f"/api/v1/runs/{planted.after}/heatmap.png")
    rgb = cell_rgb(png_pixels(response.content), response.headers, len(rows) - 1, 2, window=4)
    assert luminance(rgb) > 0.8 and np.ptp(rgb) < 0.1  # hatched light grey, not a data colour


def test_heatmap_sublayer_rank_and_other_stats(visual_client, planted):
    blocks = visual_client.get(f"/api/v1/runs/{planted.before}/heatmap.png?sublayer=qkv&rank=0")
    assert blocks.status_code == 200, blocks.text
    assert shapes(blocks.headers) == [(6, 21)]
    assert [r["label"] for r in rows_of(visual_client, planted.before, "?sublayer=qkv")][:2] == ["block 1", "block 2"]
    scale = visual_client.get(f"/api/v1/runs/{planted.before}/heatmap.png?tensor=activation&stat=scale_inv_max")
    assert scale.status_code == 200, scale.text
    assert float(scale.headers["x-heatmap-vmax"]) > 0


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("dpi=601", "InvalidParameter"),
        ("dpi=abc", "InvalidParameter"),
        ("vmax=0", "InvalidParameter"),
        ("rank=3", "InvalidParameter"),
        ("sublayer=nope", "InvalidParameter"),
        ("stat=nope", "NoData"),
        ("tensor=wgrad", "NoData"),
        ("mark_iteration=5000", "InvalidParameter"),
        ("critical=0.1", "InvalidThresholds"),
        ("colour=red", "UnknownParameter"),
        ("width=1", "InvalidParameter"),
        ("show_skip=maybe", "InvalidParameter"),
        ("width=60&height=60&dpi=600", "InvalidParameter"),
    ],
)
def test_heatmap_bad_parameters_are_400(visual_client, planted, query, error):
    response = visual_client.get(f"/api/v1/runs/{planted.before}/heatmap.png?{query}")
    assert response.status_code == 400, response.text
    body = response.json()
    assert set(body) == {"error", "detail"} and body["error"] == error and body["detail"]


def test_heatmap_unknown_run_is_404_and_unready_run_409(visual_client, planted, db_engine):
    missing = visual_client.get("/api/v1/runs/99999999/heatmap.svg")
    assert missing.status_code == 404 and missing.json()["error"] == "NotFound"
    with Session(db_engine) as session:  # a queued run no worker was told about
        run = RunRepository(session).add(NewRun("queued", f"visual-{uuid.uuid4().hex}", (), {}, "f" * 64, None, 0, ""))
        session.commit()
        run_id = run.id
    try:
        response = visual_client.get(f"/api/v1/runs/{run_id}/heatmap.png")
        assert response.status_code == 409 and response.json()["error"] == "NotReady"
    finally:
        with Session(db_engine) as session:
            repo = RunRepository(session)
            repo.delete(repo.get(run_id))
            session.commit()
