"""Collector logs go through the real service's upload and ingest with every line accounted for."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from torch import nn

from fp8_policy.client.packing import pack_directory
from fp8_policy.collect import FP8StatsCollector
from fp8_policy.policy.synthetic import PLAN_ORDER
from tests.conftest import wait_for_run

RUNS = "/api/v1/runs"
PLAN_KEYS = {f"{tensor}/{gemm}" for tensor, gemm in PLAN_ORDER}  # the six plan lines TE writes per GEMM layer


class Block(nn.Module):
    def __init__(self, layer_number: int) -> None:
        super().__init__()
        self.layer_number = layer_number
        self.self_attention = nn.ModuleDict({"linear_qkv": nn.Linear(32, 96), "linear_proj": nn.Linear(32, 32)})
        self.mlp = nn.ModuleDict({"linear_fc1": nn.Linear(32, 64), "linear_fc2": nn.Linear(64, 32)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, _k, v = self.self_attention["linear_qkv"](x).chunk(3, dim=-1)
        x = x + self.self_attention["linear_proj"](torch.tanh(q) * v)
        return x + self.mlp["linear_fc2"](torch.relu(self.mlp["linear_fc1"](x)))


class Model(nn.Module):
    """Megatron-like names: `decoder.layers.<n>.self_attention.linear_qkv`, ..., `output_layer`."""

    def __init__(self, n_layers: int = 3) -> None:
        super().__init__()
        self.decoder = nn.Module()
        self.decoder.layers = nn.ModuleList([Block(i + 1) for i in range(n_layers)])
        self.output_layer = nn.Linear(32, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.decoder.layers:
            x = block(x)
        return self.output_layer(x)


def collect_run(log_dir: Path, *, torchao: bool, steps: int = 6) -> int:
    """Train a few steps with the collector on; returns the number of stats lines written."""
    torch.manual_seed(0)
    model = Model()
    options = {}
    if torchao:
        float8 = pytest.importorskip("torchao.float8")
        float8.convert_to_float8_training(
            model, config=float8.Float8LinearConfig(emulate=True), module_filter_fn=lambda m, fqn: fqn != "output_layer"
        )
    else:
        options = {
            "recipe": "delayed",
            "stats": ["underflows%", "overflows%", "scale_inv_min", "scale_inv_max", "mse", "mxfp8_underflows%"],
            "bf16_layers": [r"model.output_layer"],
        }
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(1)
    with FP8StatsCollector(model, log_dir, freq=2, **options) as collector:
        for _ in range(steps):
            model(torch.randn(4, 8, 32, generator=generator)).logsumexp(-1).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            collector.step()
        return len(collector.stats_log.read_text().splitlines())


@pytest.mark.parametrize("torchao", [False, True], ids=["plain-delayed", "torchao"])
def test_collector_logs_ingest_with_zero_skipped_lines(
    client: TestClient, project: str, tmp_path: Path, torchao: bool
) -> None:
    written = collect_run(tmp_path / "logs", torchao=torchao)
    with pack_directory(tmp_path / "logs") as archive:
        response = client.post(
            RUNS, files={"file": ("run.tar.gz", archive.read(), "application/gzip")}, data={"project": project}
        )
    assert response.status_code == 202, response.text

    run = wait_for_run(client, response.json()["id"])

    assert run["status"] == "ready", run["error"]
    stats_per_tensor = 4 if torchao else 6
    assert written == 12 * 3 * stats_per_tensor * 3  # 12 FP8 layers x 3 tensors x stats x iterations 0, 2, 4
    assert (run["lines_read"], run["lines_skipped"], run["lines_blank"], run["lines_duplicated"]) == (written, 0, 0, 0)
    assert (run["points"], run["iteration_min"], run["iteration_max"]) == (written, 0, 4)
    report = run["ingest_report"]
    assert report["unsplit_metric_names"] == [] and report["unsplit_points"] == 0
    (metadata,) = [f for f in report["files"] if f["kind"] == "metadata"]
    assert metadata["lines_unrecognised"] == 0

    layers = {layer["name"]: layer for layer in client.get(f"{RUNS}/{run['id']}/layers").json()}
    body = [
        f"model.decoder.layers.{n}.{sub}"
        for n in (1, 2, 3)
        for sub in ("self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2")
    ]
    assert set(layers) == {*body, "model.output_layer"}
    for name in body:
        assert (layers[name]["precision"], layers[name]["fp8"], layers[name]["has_fp8_stats"]) == ("fp8", True, True)
        assert layers[name]["plans"] == dict.fromkeys(PLAN_KEYS, "Quantize")
        assert {s["tensor"] for s in layers[name]["stats"]} == {"activation", "weight", "gradient"}
    head = layers["model.output_layer"]
    assert (head["group"], head["precision"], head["fp8"], head["stats"]) == ("head", "high", False, [])
    assert set(head["plans"].values()) == {"High Precision"}
