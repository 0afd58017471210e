"""A BF16 run whose only stats are the collector's nvfp4_ what-ifs is analysed as BF16, not as NVFP4 training."""

from __future__ import annotations

from pathlib import Path

import torch
from fastapi.testclient import TestClient

from fp8_policy.client.packing import pack_directory
from fp8_policy.collect import FP8StatsCollector
from fp8_policy.policy.analysis import analyze
from fp8_policy.policy.recommend import recommend
from tests.client.collect.test_collector import read_metadata
from tests.client.collect.test_collector_nvfp4 import Pair
from tests.conftest import wait_for_run


def _collect(tmp_path: Path, stats: list[str]) -> Path:
    torch.manual_seed(0)
    model = Pair()
    generator = torch.Generator().manual_seed(1)
    with FP8StatsCollector(model, tmp_path, stats=stats) as collector:
        for _ in range(8):
            model(torch.randn(64, 32, generator=generator)).square().mean().backward()
            model.zero_grad()
            collector.step()
    return tmp_path


def test_whatif_only_run_is_bf16_not_nvfp4(tmp_path: Path) -> None:
    from bench.eval_ingest import parse_tree

    run = parse_tree(_collect(tmp_path, ["nvfp4_underflows%", "nvfp4_mse"]))
    assert "LAYER=model.fc1: Tensor: activation, gemm fprop - High Precision" in read_metadata(tmp_path)
    run.metadata["gpu"] = "B200"
    training = analyze(run).training
    assert training.recipe is None and training.high_precision, training
    rec = recommend(run).to_dict()
    text = " ".join(rec["rationale"])
    assert "keep nvfp4" not in text and "NVFP4 run" not in text, text
    assert "the run trained in BF16" in rec["recipe"]["reason"], rec["recipe"]
    assert "recipe kept" not in rec["recipe"]["evidence"], rec["recipe"]
    ladder = rec["precision_ladder"]
    assert {r["precision"] for r in ladder["layers"].values()} == {"bf16"}, ladder
    assert all(any("what-if" in e for e in r["evidence"]) for r in ladder["layers"].values()), ladder
    assert "Healthy" not in text and "already ran in BF16" in text, text


def test_training_cast_stats_keep_quantize_plans(tmp_path: Path) -> None:
    from bench.eval_ingest import parse_tree

    run = parse_tree(_collect(tmp_path, ["underflows%", "nvfp4_underflows%"]))
    assert "LAYER=model.fc1: Tensor: activation, gemm fprop - Quantize" in read_metadata(tmp_path)
    assert not analyze(run).training.high_precision


def test_nvfp4_inference_without_plans_is_stated_as_an_assumption(tmp_path: Path) -> None:
    import shutil

    from bench.eval_ingest import parse_tree

    _collect(tmp_path, ["nvfp4_underflows%", "nvfp4_mse"])
    shutil.rmtree(tmp_path / "rank_0" / "nvdlfw_inspect_logs")  # TE-style stats alone: no plan lines
    run = parse_tree(tmp_path)
    rec = recommend(run).to_dict()
    assert rec["recipe"]["name"] == "nvfp4"
    assert "assumed NVFP4 training" in " ".join(rec["rationale"])
    assert any("assumed NVFP4 training" in a for a in rec["precision_ladder"]["assumptions"])


def test_recommendation_endpoint_calls_the_run_bf16(client: TestClient, project: str, tmp_path: Path) -> None:
    """Upload -> ingest -> POST recommendation: the BF16 run reaches the API as BF16, and the ladder's lifted
    layers are a declared field of the response (none here: no layer trained in NVFP4)."""
    _collect(tmp_path / "logs", ["nvfp4_underflows%", "nvfp4_mse"])
    with pack_directory(tmp_path / "logs") as archive:
        response = client.post(
            "/api/v1/runs",
            files={"file": ("run.tar.gz", archive.read(), "application/gzip")},
            data={"project": project},
        )
    assert response.status_code == 202, response.text
    run = wait_for_run(client, response.json()["id"])
    assert run["status"] == "ready", run["error"]
    body = client.post(f"/api/v1/runs/{run['id']}/recommendation", json={"gpu": "B200"}).json()
    assert "the run trained in BF16" in body["recipe"]["reason"], body["recipe"]
    # what the run trained in, and that the recommended low-precision recipe changes it (not "unchanged")
    assert body["recipe"]["current"] == body["recipe"]["changed_from"] == "bf16", body["recipe"]
    assert "keep nvfp4" not in " ".join(body["rationale"])
    ladder = body["precision_ladder"]
    assert ladder["lifted"] == [] and set(ladder["counts"].items()) >= {("bf16", 2), ("nvfp4", 0)}, ladder


def test_lifted_layers_are_a_declared_field_of_the_api_ladder() -> None:
    from fp8_policy.service.analysis.cost_schemas import PrecisionLadderRead
    from tests.policy.recommend.test_ladder import ladder, nvfp4_block7_failing

    rec, data = ladder(nvfp4_block7_failing())
    assert rec.ladder is not None and rec.ladder.lifted
    read = PrecisionLadderRead.model_validate(data["precision_ladder"])
    assert read.model_dump()["lifted"] == list(rec.ladder.lifted)
    assert "lifted" in PrecisionLadderRead.model_json_schema()["properties"]
