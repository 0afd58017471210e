"""A stored run with loss-sensitivity statistics for the frontier, target and experiment API tests: NVFP4 training
on a B200, 8 Megatron-named blocks plus an output layer; one layer low in underflow but high in NVFP4 sensitivity
(`SENSITIVE`), one high in underflow but negligible in sensitivity (`HARMLESS`). Uploaded as one statistics log."""

from __future__ import annotations

import gzip
import json

from fastapi.testclient import TestClient

from tests.conftest import upload, wait_for_run
from tests.support.archives import stats_log

SUBS = ("self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2")
LAYERS = [f"model.decoder.layers.{b}.{sub}" for b in range(1, 9) for sub in SUBS] + ["model.output_layer"]
SENSITIVE = "model.decoder.layers.3.self_attention.linear_qkv"
HARMLESS = "model.decoder.layers.6.mlp.linear_fc1"
METADATA = {"recipe": "NVFP4BlockScaling", "gpu": "B200", "hidden_size": 64, "ffn_hidden_size": 256, "vocab_size": 128}


def points(with_sensitivity: bool = True) -> list[tuple[str, int, float]]:
    out = []
    for it in range(0, 400, 10):
        for layer in LAYERS:
            for tensor in ("activation", "gradient", "weight"):
                level = 25.0 if (layer == HARMLESS and tensor == "gradient") else 10.0 if tensor == "weight" else 7.0
                out.append((f"{layer}_{tensor}_nvfp4_underflows%", it, level + 0.01 * (it % 7)))
            if not with_sensitivity:
                continue
            for prefix, base in (("nvfp4", 100.0), ("mxfp8", 8.0)):
                value = base * 40 if (layer == SENSITIVE and prefix == "nvfp4") else base
                value = value / 20 if layer == HARMLESS else value
                for tensor in ("output", "dgrad", "wgrad"):
                    out.append((f"{layer}_{tensor}_{prefix}_sensitivity", it, value))
    return out


def upload_sensitivity_run(
    client: TestClient, project: str, *, with_sensitivity: bool = True, name: str = "sens"
) -> int:
    body = gzip.compress(stats_log(points(with_sensitivity)))
    response = upload(client, body, project, filename=f"{name}.log.gz", name=name, metadata=json.dumps(METADATA))
    assert response.status_code == 202, response.text
    run = wait_for_run(client, response.json()["id"])
    assert run["status"] == "ready" and run["lines_skipped"] == 0, run
    return int(run["id"])
