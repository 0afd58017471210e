"""The heatmap's row judgement of a mixed-format run: each row against the bands of the format its drawn series
measures (policy/analysis/format_bands.py), the rule the analysis uses, both where verdicts are absent (a live run) and in
the critical bound the summary names."""

from __future__ import annotations

import numpy as np

from fp8_policy.policy.analysis.format_bands import SeriesBands, stat_key_prefix
from fp8_policy.policy.heatmap import build_matrix, summarize
from fp8_policy.policy.names import layer_structure
from fp8_policy.policy.records import LayerInfo, MetricName, Precision, Series
from fp8_policy.policy.thresholds import Thresholds
from fp8_policy.service.visual.actions import summary_for
from fp8_policy.service.visual.params import parse_heatmap_params

LAYER = "model.module.decoder.layers.{}.mlp.linear_fc1"


def matrix(stat_key: str, levels: dict[int, float]):
    infos = [LayerInfo(LAYER.format(b), layer_structure(LAYER.format(b)), Precision.FP8, True) for b in levels]
    its = np.arange(20, dtype=np.int64)
    series = [
        Series(0, MetricName(LAYER.format(b), "gradient", stat_key), its, np.full(20, level))
        for b, level in levels.items()
    ]
    return build_matrix(infos, series)


def test_an_nvfp4_stat_is_judged_with_nvfp4_bands() -> None:
    """7 % of nvfp4_underflows% is healthy NVFP4 (critical 13 %), 14 % is critical; the summary names 13."""
    drawn = matrix("nvfp4_underflows%", {1: 7.0, 2: 14.0})
    summary = summary_for(drawn, parse_heatmap_params({"tensor": "gradient", "stat": "nvfp4_underflows%"}))
    assert [drawn.rows[k].layer for k in summary.boxed] == [LAYER.format(2)]
    assert summary.critical == 1 and summary.critical_threshold == 13.0


def test_a_bare_stat_is_judged_with_the_layers_stated_recipe() -> None:
    """Run metadata says block 2 trained in NVFP4 (a precision config): its 3 % row is not critical, block 1's FP8
    3 % row is; the rows differ, so the summary names the requested FP8 bound."""
    drawn = matrix("underflows%", {1: 3.0, 2: 3.0})
    params = parse_heatmap_params({"tensor": "gradient", "stat": "underflows%"})
    metadata = {"recipe": "mxfp8", "layer_recipes": {"*.layers.2.*": "NVFP4BlockScaling"}}
    summary = summary_for(drawn, params, metadata=metadata)
    assert [drawn.rows[k].layer for k in summary.boxed] == [LAYER.format(1)]
    assert summary.critical_threshold == 2.0
    plain = summary_for(drawn, params)  # without the metadata both rows are FP8's
    assert plain.critical == 2


def test_row_bands_reach_the_policy_summary_directly() -> None:
    thresholds = Thresholds()
    drawn = matrix("underflows%", {1: 3.0, 2: 3.0})
    bands = SeriesBands.from_metadata(thresholds, {"layer_recipes": {LAYER.format(2): "nvfp4"}})
    rows = {row.layer: bands.for_key(row.layer, "underflows%") for row in drawn.rows}
    assert summarize(drawn, thresholds, percent=True, row_bands=rows).critical == 1
    assert summarize(drawn, thresholds, percent=True).critical == 2
    assert stat_key_prefix("mxfp8_underflows%_columnwise") == "mxfp8" and stat_key_prefix("underflows%") is None


def test_the_legend_of_an_nvfp4_stat_draws_nvfp4_bands() -> None:
    """The colour bar's band labels and ticks (service/visual/legend.py, from `Style.thresholds`) follow the bands
    the rows are judged with: NVFP4's for an nvfp4_ stat, the requested (FP8) ones for a bare stat."""
    from fp8_policy.service.visual.actions import style_for

    nvfp4 = parse_heatmap_params({"tensor": "gradient", "stat": "nvfp4_underflows%", "vmax": "20"})
    style = style_for(nvfp4, [matrix("nvfp4_underflows%", {1: 7.0})])
    assert (style.thresholds.warning, style.thresholds.critical) == (Thresholds().nvfp4_warning, 13.0)
    bare = parse_heatmap_params({"tensor": "gradient", "stat": "underflows%"})
    assert style_for(bare, [matrix("underflows%", {1: 3.0})]).thresholds.critical == 2.0
