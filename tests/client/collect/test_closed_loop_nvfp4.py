"""`examples/closed_loop_nvfp4.py --quick` end to end: NVFP4 training, statistics, service, ladder, retraining, table."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.client.collect.test_closed_loop import run_quick

PLANTED = {"model.decoder.layers.2.self_attention.linear_qkv", "model.decoder.layers.2.mlp.linear_fc1"}


@pytest.mark.slow
def test_quick_frontier_loop_lifts_the_planted_layers_and_closes_the_gap(tmp_path: Path) -> None:
    out = tmp_path / "frontier"
    result = run_quick("closed_loop_nvfp4.py", out)
    report = json.loads((out / "report.json").read_text())

    log = out / "before" / "rank_0" / "nvdlfw_inspect_statistics_logs" / "nvdlfw_inspect_globalrank-0.log"
    names = {m[1] for m in re.finditer(r" - INFO - (\S+) \t", log.read_text())}
    assert "model.decoder.layers.2.mlp.linear_fc1_activation_nvfp4_underflows%" in names
    assert "model.decoder.layers.2.mlp.linear_fc1_weight_nvfp4_mse" in names
    assert "model.decoder.layers.2.mlp.linear_fc1_gradient_mxfp8_underflows%" in names
    assert not any(
        name.endswith(("_underflows%", "_mse")) and "fp4" not in name and "mxfp8" not in name for name in names
    )
    assert report["service_run"]["lines_skipped"] == 0

    assert report["precision_source"] == "precision_ladder"
    layers = report["layers"]
    assert len(layers) == 9 and set(report["planted_layers"]) == PLANTED
    for name in PLANTED:  # the outlier channels flush most of each 16-element block: far above the others
        assert layers[name]["precision"] != "nvfp4", layers[name]
        assert layers[name]["worst_nvfp4_underflows%"] > 50 and layers[name]["evidence"]
    assert report["verdict"]["planted_layers_missed"] == []
    assert sum(report["layers_per_precision"].values()) == 9
    assert set(report["layers_per_precision"]) <= {"nvfp4", "mxfp8", "block", "current", "delayed", "bf16"}
    cost = report["predicted_cost"]
    assert cost and sum(cost["gemm_share"].values()) == pytest.approx(1.0, abs=1e-3)

    runs = report["runs"]
    assert runs["bf16"]["eval_gap_vs_bf16"] == 0.0
    assert runs["ladder"]["eval_gap_vs_bf16"] < runs["nvfp4"]["eval_gap_vs_bf16"]
    assert isinstance(report["verdict"]["helped"], bool) and report["verdict"]["why"]
    assert "predicted cost:" in result.stdout and "verdict:" in result.stdout
