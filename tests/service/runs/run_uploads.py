"""Uploads and reads shared by the runs API tests (test_runs_api.py, test_run_reads.py, test_run_series.py): the real
bionemo ESM2 / Llama3 trees (read from ../shared, never copied) or small synthetic nvdlfw_inspect logs, uploaded and
ingested, and the layer, series and list reads of the API."""

from __future__ import annotations

import httpx
from fastapi.testclient import TestClient

from tests.conftest import upload, wait_for_run
from tests.support.archives import (
    esm2_tar_gz,
    stats_log,
)

RUNS = "/api/v1/runs"
ESM2_LAYER = "model.esm.encoder.layers.{}.self_attention.layernorm_qkv"
QKV1 = ESM2_LAYER.format(1)
LLAMA3_QKV1 = "model.model.layers.1.self_attention.layernorm_qkv"
ESM2_LAYERS = [
    *(
        name.format(k)
        for k in range(1, 7)
        for name in (
            "model.esm.encoder.layers.{}.self_attention.layernorm_qkv",
            "model.esm.encoder.layers.{}.self_attention.proj",
            "model.esm.encoder.layers.{}.layernorm_mlp.fc1",
            "model.esm.encoder.layers.{}.layernorm_mlp.fc2",
        )
    ),
    "model.lm_head.decoder",
    "model.lm_head.dense",
]
SUBLAYERS = ["qkv", "proj", "fc1", "fc2"]
STATS = ("underflows%", "scale_inv_min", "scale_inv_max", "mse")
TENSORS = ("activation", "gradient", "weight")
FC1 = "model.layers.1.fc1"
UF = f"{FC1}_activation_underflows%"


def clean_stats_file(path: str, lines: int) -> dict[str, object]:
    """The ingest report's entry for a rank-0 statistics log read whole: every line a statistics line, one session
    (read as logged, no iteration offset)."""
    return {
        "path": path,
        "rank": 0,
        "kind": "stats",
        "lines_read": lines,
        "stats_lines": lines,
        "blank_lines": 0,
        "skipped_lines": 0,
        "skipped_samples": [],
        "iteration_offset": 0,
    }


def upload_raw(client: TestClient, data: bytes, *, content_type: str, **params: str) -> httpx.Response:
    """Raw-body upload with the fields as query parameters."""
    return client.post(RUNS, content=data, headers={"Content-Type": content_type}, params=params)


def ingest(client: TestClient, response: httpx.Response, status: str = "ready") -> dict:
    assert response.status_code == 202, response.text
    run = wait_for_run(client, response.json()["id"])
    assert run["status"] == status, run["error"]
    return run


def ready_esm2(client: TestClient, project: str) -> dict:
    return ingest(client, upload(client, esm2_tar_gz(), project=project, filename="esm2.tar.gz"))


def ready_log(client: TestClient, project: str, data: bytes, filename: str = "stats.log") -> dict:
    return ingest(client, upload(client, data, project=project, filename=filename, content_type="text/plain"))


def tiny_log(tag: int) -> bytes:
    """A small valid stats log whose bytes differ per tag (so uploads do not deduplicate)."""
    return stats_log([(UF, it, tag + it / 100) for it in range(0, 30, 10)])


def series_of(client: TestClient, run_id: int, layer: str, tensor: str, stat: str, **params) -> httpx.Response:
    return client.get(f"{RUNS}/{run_id}/series", params={"layer": layer, "tensor": tensor, "stat": stat, **params})


def summary(layer: dict, tensor: str, stat: str) -> dict:
    (found,) = [s for s in layer["stats"] if s["tensor"] == tensor and s["stat"] == stat]
    return found


def list_ids(client: TestClient, **params) -> list[int]:
    response = client.get(RUNS, params=params)
    assert response.status_code == 200, response.text
    return [run["id"] for run in response.json()["items"]]
