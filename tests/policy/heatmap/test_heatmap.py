"""policy.heatmap: the matrix (rows, columns, NaN for missing points, max over ranks), summary and geometry."""

from __future__ import annotations

import numpy as np
import pytest

from fp8_policy.policy.heatmap import (
    ROW_BF16,
    ROW_DATA,
    build_matrix,
    default_vmax,
    is_percent_stat,
    plan_geometry,
    row_levels,
    severity_bands,
    sublayers_of,
    summarize,
)
from fp8_policy.policy.names import layer_structure, order_key
from fp8_policy.policy.records import LayerInfo, MetricName, Precision, Series
from fp8_policy.policy.thresholds import Thresholds

BLOCK = "model.layers.{}.self_attention.layernorm_qkv"
FC1 = "model.layers.{}.layernorm_mlp.fc1"


def info(name: str, precision: Precision = Precision.FP8, stats: bool = True) -> LayerInfo:
    return LayerInfo(name, layer_structure(name), precision, stats)


def series(layer: str, iterations, values, rank: int = 0) -> Series:
    return Series(
        rank,
        MetricName(layer, "gradient", "underflows%"),
        np.asarray(iterations, dtype=np.int64),
        np.asarray(values, dtype=np.float64),
    )


def model(*extra: LayerInfo) -> list[LayerInfo]:
    layers = [
        info("model"),
        info("model.embed_tokens", Precision.UNKNOWN, False),
        info(BLOCK.format(1)),
        info(FC1.format(1)),
        info(BLOCK.format(2)),
        info(FC1.format(2)),
        info("model.lm_head", Precision.HIGH, False),
        *extra,
    ]
    return sorted(layers, key=lambda layer: order_key(layer.name))


def test_heatmap_rows_follow_model_order_with_bf16_rows_and_without_containers():
    data = [
        series(name, [0, 10], [0.1, 0.2]) for name in (FC1.format(2), BLOCK.format(1), FC1.format(1), BLOCK.format(2))
    ]
    matrix = build_matrix(model(), data)
    assert [row.layer for row in matrix.rows] == [
        BLOCK.format(1),
        FC1.format(1),
        BLOCK.format(2),
        FC1.format(2),
        "model.lm_head",
    ]
    assert [row.kind for row in matrix.rows] == [ROW_DATA] * 4 + [ROW_BF16]
    assert [row.label for row in matrix.rows][:2] == ["1 qkv", "1 fc1"]
    assert np.isnan(matrix.values[4]).all()
    assert [(s.name, s.start, s.stop) for s in matrix.group_spans()] == [("body", 0, 4), ("head", 4, 5)]
    assert [(s.start, s.stop) for s in matrix.bf16_spans()] == [(4, 5)]


def test_heatmap_missing_iterations_stay_nan_and_ranks_reduce_by_max():
    data = [
        series(BLOCK.format(1), [0, 10, 20, 30], [1.0, 2.0, 3.0, 4.0], rank=0),
        series(BLOCK.format(1), [0, 10, 20, 30], [1.5, 0.5, np.nan, 4.5], rank=1),
        series(FC1.format(1), [0, 20], [7.0, 8.0]),
    ]  # another freq: no points at 10 and 30
    matrix = build_matrix(model(), data)
    assert matrix.iterations.tolist() == [0, 10, 20, 30]
    np.testing.assert_array_equal(matrix.values[0], [1.5, 2.0, 3.0, 4.5])
    np.testing.assert_array_equal(np.isnan(matrix.values[1]), [False, True, False, True])
    assert matrix.column_index(14) == 1 and matrix.column_index(16) == 2 and matrix.column_index(99) == 3


def test_heatmap_sublayer_mode_has_one_row_per_block():
    data = [series(name, [0], [0.1]) for name in (BLOCK.format(1), FC1.format(1), BLOCK.format(2))]
    matrix = build_matrix(model(), data, sublayer="qkv")
    assert [row.label for row in matrix.rows] == ["block 1", "block 2"]
    assert sublayers_of(model()) == ["qkv", "fc1", "lm_head"]


def test_heatmap_summary_boxes_the_worst_rows_at_or_above_critical():
    values = np.array([[0.1, 0.2, 0.3], [5.0, 6.0, 7.0], [2.5, 2.5, np.nan], [3.0, 9.0, 4.0], [np.nan] * 3])
    levels = row_levels(values)
    np.testing.assert_allclose(levels[:4], [0.2, 6.0, 2.5, 4.0])
    assert np.isnan(levels[4])
    data = [
        series(name, [0, 1, 2], row)
        for name, row in zip((BLOCK.format(1), FC1.format(1), BLOCK.format(2), FC1.format(2)), values[:4], strict=True)
    ]
    matrix = build_matrix(model(), data)
    summary = summarize(matrix, Thresholds(), percent=True, boxes=2)
    assert (summary.components, summary.bf16_rows, summary.critical) == (4, 1, 3)
    assert summary.boxed == (1, 3)
    assert summary.max == 9.0 and summary.mean == pytest.approx(np.nanmean(values[:4]))
    plain = summarize(matrix, Thresholds(), percent=False)
    assert plain.critical is None and plain.boxed == ()


def test_heatmap_bands_scale_and_percent_stats():
    bands = severity_bands(Thresholds(), 3.0)
    assert [(b.name, b.low, b.high) for b in bands] == [("ok", 0.0, 0.5), ("warning", 0.5, 2.0), ("critical", 2.0, 3.0)]
    assert is_percent_stat("mxfp8_underflows%_columnwise") and not is_percent_stat("scale_inv_min")
    assert default_vmax(np.array([[1.0, np.nan]]), percent=True) == 6.0
    assert default_vmax(np.array([[0.25, np.nan]]), percent=False) == 0.25


def test_heatmap_geometry_gives_exact_pixels_and_cell_centres():
    geometry = plan_geometry(30, 12, dpi=100, width=12.0, height=7.0)
    assert geometry.pixels == (1200, 700)
    x0, y0, x1, y1 = geometry.extent_px()
    assert 0 < x0 < x1 < 1200 and 0 < y0 < y1 < 700
    cx, cy = geometry.cell_center_px((30, 10), 0, 0)
    assert x0 < cx < x0 + (x1 - x0) / 10 and y0 < cy < y0 + (y1 - y0) / 30
    two = plan_geometry(30, 12, panels=2, dpi=100)
    assert two.pixels[0] > plan_geometry(30, 12, dpi=100).pixels[0]
    assert two.extent_px(1)[0] > two.extent_px(0)[2]
    many = plan_geometry(2000, 12)
    assert many.label_stride > 1 and many.height_in <= 26.0


@pytest.mark.parametrize(
    "kwargs", [{"width": 1.0}, {"height": 2.0}, {"width": 60.0, "height": 60.0, "dpi": 600}, {"width": 3.0}]
)
def test_heatmap_geometry_rejects_sizes_that_cannot_hold_it(kwargs):
    with pytest.raises(ValueError):
        plan_geometry(20, 10, **kwargs)
