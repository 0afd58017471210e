"""`GET .../recommendation?format=te-monitor` on the real bionemo ESM-2 run: the YAML nvdlfw_inspect's own
ConfigManager loads, with every layer the policy keeps in high precision watched by LogTensorStats only (TE 2.20
asserts when LogFp8TensorStats watches a layer that runs outside FP8) and no Disable* feature anywhere."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from bench.te_config_manager import TE_FEATURES, TeConfigManager
from tests.conftest import wait_for_run
from tests.support.archives import ESM2, esm2_tar_gz

QUANT_FEATURES = {"LogFp8TensorStats", "LogNvfp4TensorStats"}
LOG_AND_DISABLE = tuple(name for name in TE_FEATURES if name.startswith(("Log", "Disable")))


@pytest.fixture
def config_manager(tmp_path: Path) -> Iterator[object]:
    """`load(text)` -> nvdlfw_inspect's real ConfigManager with TE's Log* and Disable* feature names registered."""
    with TeConfigManager(tmp_path, LOG_AND_DISABLE) as manager:
        yield lambda text: manager.load(text, "te_monitor.yaml")


@pytest.mark.skipif(not ESM2.is_dir(), reason="bionemo fixtures not available")
def test_esm2_te_monitor_watches_kept_layers_with_log_tensor_stats_only(
    client: TestClient, project: str, config_manager
) -> None:
    response = client.post("/api/v1/runs", files={"file": ("esm2.tgz", esm2_tar_gz())}, data={"project": project})
    run_id = wait_for_run(client, response.json()["id"])["id"]
    policy = client.get(f"/api/v1/runs/{run_id}/recommendation").json()
    rows = client.get(f"/api/v1/runs/{run_id}/analysis").json()["layers"]
    response = client.get(f"/api/v1/runs/{run_id}/recommendation", params={"format": "te-monitor"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/yaml")
    assert 'filename="te_monitor_config.yaml"' in response.headers["content-disposition"]
    text = response.text
    assert "Disable" not in "".join(line for line in text.splitlines() if not line.startswith("#"))

    ladder = (policy.get("precision_ladder") or {}).get("layers") or {}
    kept = set(policy["fp8_skip_layers"]) | {o["layer"] for o in policy["gemm_overrides"]}
    kept |= {row["name"] for row in rows if row["precision"] == "high"}
    kept |= {name for name, rung in ladder.items() if rung["precision"] == "bf16"}
    assert {"model.lm_head.dense", "model.lm_head.decoder"} <= kept  # bionemo runs its LM head in BF16

    manager = config_manager(text)
    for row in rows:
        features = set(manager.get_config_for_layer(row["name"]).get("transformer_engine", {}))
        if row["name"] in kept:
            assert features == {"LogTensorStats"}, row["name"]
        else:
            assert len(features & QUANT_FEATURES) == 1 and "LogTensorStats" not in features, (row["name"], features)
    assert yaml.safe_load(text)  # plain YAML too


def test_te_monitor_is_a_documented_format(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    parameters = document["paths"]["/api/v1/runs/{run_id}/recommendation"]["get"]["parameters"]
    enum = next(p for p in parameters if p["name"] == "format")["schema"]["enum"]
    assert enum == ["json", "te-yaml", "megatron", "hydra", "torchao", "te-recipe", "torchtitan", "te-monitor"]
