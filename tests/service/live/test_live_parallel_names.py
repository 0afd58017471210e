"""A live pipeline-parallel run names layers globally, as the finalized run's ingest will: events of a stage whose
blocks are logged locally (every stage from 0) carry the global block; names already global stay (both backends)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.service.live.test_live_runs import create, put
from tests.support.archives import stats_log, stats_relpath

BLOCKS = "model.module.decoder.layers"
PP2 = {"pipeline_model_parallel_size": 2, "world_size": 2, "num_layers": 8}


def _crossing(layer_numbers: list[int], failing: int) -> bytes:
    """Gradient underflows% of each block's fc2; `failing` enters the critical band."""
    points = []
    for it in range(0, 200, 10):
        for number in layer_numbers:
            value = 9.0 if number == failing and it >= 100 else 0.1
            points.append((f"{BLOCKS}.{number}.mlp.linear_fc2_gradient_underflows%", it, value))
    return stats_log(points)


@pytest.mark.parametrize(
    ("logged", "failing", "expected"),
    [
        ([0, 1, 2, 3], 1, f"{BLOCKS}.5.mlp.linear_fc2"),  # local ModuleList indices: stage 1 holds blocks 4-7
        ([5, 6, 7, 8], 6, f"{BLOCKS}.6.mlp.linear_fc2"),  # Megatron's layer_number through nvdlfw: already global
    ],
    ids=["local", "layer_number"],
)
def test_live_events_of_a_later_stage_name_the_global_block(
    client: TestClient, logged: list[int], failing: int, expected: str
) -> None:
    run = create(client, "live-pp", metadata=PP2)
    response = put(client, run["id"], stats_relpath(1), 0, _crossing(logged, failing))
    assert response.status_code == 200, response.text
    layers = {e["layer"] for e in response.json()["events"] if e["kind"] == "band_crossing"}
    assert layers == {expected}


def test_without_a_layout_live_names_stay_as_logged(client: TestClient) -> None:
    run = create(client, "live-no-layout")
    response = put(client, run["id"], stats_relpath(1), 0, _crossing([0, 1, 2, 3], 1))
    layers = {e["layer"] for e in response.json()["events"] if e["kind"] == "band_crossing"}
    assert layers == {f"{BLOCKS}.1.mlp.linear_fc2"}
