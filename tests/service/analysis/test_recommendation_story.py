"""Issue 12 through the API: the GPU metadata key, the per-format BF16 sets and labels in the recommendation JSON."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from tests.service.analysis.test_analysis_api import upload_scenario


def test_gpu_metadata_and_gpu_query_decide_the_capability(client: TestClient, tmp_path: Path, project: str) -> None:
    run_id = upload_scenario(client, tmp_path, project, "u_shape")  # metadata {"gpu": "H100", ...}
    body = client.get(f"/api/v1/runs/{run_id}/recommendation").json()
    text = "\n".join(body["rationale"])
    assert "gpu 'H100' = compute capability 9" in text and "assumed Hopper" not in text
    again = client.get(f"/api/v1/runs/{run_id}/recommendation", params={"gpu": "B200"}).json()
    assert "gpu 'B200' = compute capability 10" in "\n".join(again["rationale"])
    # a GPU the request names must be known (`--gpu H1000` used to answer 200 with Hopper assumed in one line)
    posted = client.post(f"/api/v1/runs/{run_id}/recommendation", json={"gpu": "tpu-v5"})
    assert posted.status_code == 400 and posted.json()["error"] == "InvalidOverrides"
    assert "gpu 'tpu-v5' is not a GPU fp8-policy knows" in posted.json()["detail"]


def test_the_json_reports_the_bf16_set_of_every_format(client: TestClient, tmp_path: Path, project: str) -> None:
    run_id = upload_scenario(client, tmp_path, project, "u_shape")
    body = client.get(f"/api/v1/runs/{run_id}/recommendation").json()
    assert set(body["formats"]) == {"te-yaml", "megatron", "hydra", "torchao", "te-recipe", "torchtitan"}
    skipped = set(body["fp8_skip_layers"])
    for fmt, applied in body["formats"].items():
        assert skipped <= set(applied["bf16_layers"]) | set(applied["not_applied"]), fmt
    assert body["formats"]["te-yaml"]["exact"] is True
    assert body["recipe"]["label"].endswith("(" + body["recipe"]["class"].rsplit(".", 1)[1] + ")")
    assert {(f["pattern"], f["label"]) for f in body["findings"]} == {("u_shape", "U-shape")}
    analysis = client.get(f"/api/v1/runs/{run_id}/analysis").json()
    assert analysis["findings"][0]["label"] == "U-shape"
    hydra = client.get(f"/api/v1/runs/{run_id}/recommendation", params={"format": "hydra"}).text
    statement = body["formats"]["hydra"]["approximation"]
    assert (statement is None and "Applies the recommendation exactly" in hydra) or statement in hydra
