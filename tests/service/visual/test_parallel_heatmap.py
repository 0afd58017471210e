"""The heatmap of a tensor-parallel job colours a cell with the level the analysis judges: the layer's shards
combined with their statistic's rule (underflows% their mean), not the worst shard's (both backends)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from fp8_policy.policy.parallel import ParallelLayout
from fp8_policy.policy.synthetic.parallel import ParallelJob, write_parallel_job
from fp8_policy.policy.synthetic.run import SyntheticRun
from tests.service.ingest.test_parallel_ingest import _ingest, _meta

LAYER = "model.module.decoder.layers.2.mlp.linear_fc1"  # layer_number naming: global 1-based


@pytest.mark.parametrize("stat", ["underflows%", "scale_inv_max"])
def test_cells_of_all_ranks_combine_tensor_parallel_shards(
    client: TestClient, project: str, tmp_path: Path, stat: str
) -> None:
    layout = ParallelLayout(tp=2, pp=1, dp=1, num_layers=4)
    run = SyntheticRun(family="megatron", num_layers=4, first_index=0, iterations=40, freq=10)
    write_parallel_job(ParallelJob(run, layout), tmp_path / "logs")  # weights: each TP shard its own values
    run_id = _ingest(client, project, tmp_path / "logs", _meta(layout))["id"]

    shards = [
        client.get(
            f"/api/v1/runs/{run_id}/series",
            params={"layer": LAYER, "tensor": "weight", "stat": stat, "rank": rank},
        ).json()["series"][0]["values"]
        for rank in (0, 1)
    ]
    heat = client.get(
        f"/api/v1/runs/{run_id}/heatmap.json", params={"tensor": "weight", "stat": stat, "cells": 200}
    ).json()
    row = next(k for k, r in enumerate(heat["rows"]) if r["layer"] == LAYER)
    cells = heat["cells"]["values"][row]

    assert shards[0] != shards[1]  # the shards logged their own values
    expected = np.mean(shards, axis=0) if stat == "underflows%" else np.max(shards, axis=0)
    assert cells == pytest.approx(list(expected), abs=1e-4)  # heatmap.json rounds cells to 4 decimals
    if stat == "underflows%":  # not the worst shard's level, which the heatmap drew before
        assert cells != pytest.approx(list(np.max(shards, axis=0)), abs=1e-4)
