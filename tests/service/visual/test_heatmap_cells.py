"""GET /api/v1/runs/{id}/heatmap.json?cells=N: the values the dashboard draws its interactive heatmap from are the
image's (same rows, the same NaN-aware column averaging), with the image's colour map, and bad `cells` are 400."""

from __future__ import annotations

import re

import numpy as np
from matplotlib.colors import to_hex

from fp8_policy.service.visual.render import colormap
from tests.support.planted_pair import HEAD


def layout(client, run_id: int, query: str) -> dict:
    response = client.get(f"/api/v1/runs/{run_id}/heatmap.json{query}")
    assert response.status_code == 200, response.text
    return response.json()


def series_values(client, run_id: int, layer: str) -> tuple[list[int], list[float]]:
    body = client.get(
        f"/api/v1/runs/{run_id}/series", params={"layer": layer, "tensor": "gradient", "stat": "underflows%"}
    ).json()
    (series,) = body["series"]
    return series["iterations"], series["values"]


def test_cells_are_the_logged_values_when_they_fit(visual_client, planted):
    body = layout(visual_client, planted.before, "?cells=500")
    cells = body["cells"]
    assert len(cells["values"]) == len(body["rows"])
    assert len(cells["first"]) == body["iterations"]["count"] == 21  # every logged iteration is a column
    assert cells["first"] == cells["last"]
    row = [r["layer"] for r in body["rows"]].index(HEAD)
    iterations, values = series_values(visual_client, planted.before, HEAD)
    assert cells["first"] == iterations
    np.testing.assert_allclose(cells["values"][row], values, atol=5e-5)  # rounded to 4 decimals


def test_fewer_columns_average_consecutive_iterations(visual_client, planted):
    body = layout(visual_client, planted.before, "?cells=5")
    cells = body["cells"]
    assert len(cells["first"]) == 5  # 21 iterations, 5 per column: ceil(21 / 5) = 5 columns
    assert cells["first"][:2] == [0, 50] and cells["last"][:2] == [40, 90] and cells["last"][-1] == 200
    row = [r["layer"] for r in body["rows"]].index(HEAD)
    _iterations, values = series_values(visual_client, planted.before, HEAD)
    assert cells["values"][row][0] == round(float(np.mean(values[0:5])), 4)
    assert cells["values"][row][-1] == round(float(np.mean(values[20:21])), 4)


def test_without_cells_no_values_but_the_colour_map(visual_client, planted):
    body = layout(visual_client, planted.before, "")
    assert body["cells"] is None
    stops = body["colormap"]
    assert len(stops) == 33 and all(re.fullmatch(r"#[0-9a-f]{6}", s) for s in stops)
    assert stops[0] == to_hex(colormap()(0.0)) and stops[-1] == to_hex(colormap()(1.0))


def test_bad_cells_are_400(visual_client, planted):
    for value in ("-1", "2001", "many"):
        response = visual_client.get(f"/api/v1/runs/{planted.before}/heatmap.json?cells={value}")
        assert response.status_code == 400, response.text
        assert response.json()["error"] == "InvalidParameter"
    assert visual_client.get(f"/api/v1/runs/{planted.before}/heatmap.png?cells=10").status_code == 400  # json only
