"""`POST|GET /api/v1/runs/{id}/experiments`: the round trip, the verdict in the recommendation, the frontier chart
with measured arms, and 4xx for bad input with nothing stored."""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
from fastapi.testclient import TestClient

from tests.support.sensitivity_runs import LAYERS, SENSITIVE, upload_sensitivity_run

EXPERIMENTS = "/api/v1/runs/{}/experiments"


def arms(recommended_loss: float = 2.775, steps: int = 50) -> list[dict[str, Any]]:
    return [
        {"name": "bf16", "kind": "bf16", "steps": steps, "heldout_loss": 2.770, "step_time_s": 0.4},
        {"name": "all-nvfp4", "kind": "all_low", "steps": steps, "heldout_loss": 2.870, "step_time_s": 0.9},
        {"name": "last 15%", "kind": "rule", "rule": "last_15pct", "steps": steps, "heldout_loss": 2.80,
         "step_time_s": 0.8},
        {"name": "recommended", "kind": "recommended", "steps": steps, "heldout_loss": recommended_loss,
         "step_time_s": 0.85},
    ]  # fmt: skip


def post(client: TestClient, url: str, body: object) -> httpx.Response:
    """JSON with NaN / Infinity tokens as Python's json writes them (httpx's json= refuses them)."""
    return client.post(url, content=json.dumps(body), headers={"Content-Type": "application/json"})


def test_an_experiment_round_trip_confirms_the_recommendation(client: TestClient, project: str) -> None:
    run_id = upload_sensitivity_run(client, project)
    posted = client.post(EXPERIMENTS.format(run_id), json={"name": "seed 0", "seed": 0, "arms": arms()})
    assert posted.status_code == 201, posted.text
    experiment = posted.json()
    by_name = {arm["name"]: arm for arm in experiment["arms"]}
    assert by_name["bf16"]["heldout_gap"] == 0.0 and by_name["bf16"]["gemm_speedup"] == 1.0
    assert math.isclose(by_name["all-nvfp4"]["heldout_gap"], 0.1, abs_tol=1e-9)
    rec = client.get(f"/api/v1/runs/{run_id}/recommendation").json()
    assert by_name["recommended"]["gemm_speedup"] == rec["frontier"]["chosen"]["speedup"]
    assert by_name["all-nvfp4"]["predicted_risk"] > by_name["recommended"]["predicted_risk"] > 0
    verdict = experiment["verification"]
    assert verdict["status"] == "confirmed" and verdict["next_step"] is None, verdict
    assert verdict["best_rule_gap"] == 0.03 and verdict["recommended_gap"] == 0.005
    assert rec["verification"]["status"] == "confirmed" and rec["verification"]["experiment_id"] == experiment["id"]
    assert {m["name"] for m in rec["verification"]["measured"]} == set(by_name)
    listed = client.get(EXPERIMENTS.format(run_id)).json()
    assert [e["id"] for e in listed] == [experiment["id"]]

    png = client.get(f"/api/v1/runs/{run_id}/frontier.png", params={"target": "speedup:1.6"})
    assert png.status_code == 200 and png.content[:8] == b"\x89PNG\r\n\x1a\n"
    assert client.get(f"/api/v1/runs/{run_id}/frontier.png", params={"target": "fast"}).status_code == 400


def test_a_worse_recommended_arm_is_contradicted_with_the_layers_to_lift(client: TestClient, project: str) -> None:
    run_id = upload_sensitivity_run(client, project, name="contradicted")
    posted = client.post(EXPERIMENTS.format(run_id), json={"arms": arms(recommended_loss=2.95)})
    assert posted.status_code == 201, posted.text
    verdict = posted.json()["verification"]
    assert verdict["status"] == "contradicted" and "exceeds the predicted" in verdict["detail"]
    step = verdict["next_step"]
    assert step["rerun"] == ["recommended", "bf16"] and step["lift"]
    assert all(item["to"] == "bf16" and item["layer"] in LAYERS for item in step["lift"])
    rec = client.get(f"/api/v1/runs/{run_id}/recommendation").json()
    assert rec["verification"]["status"] == "contradicted" and rec["verification"]["next_step"]["lift"]


def test_a_diverged_arm_is_a_result_not_an_error(client: TestClient, project: str) -> None:
    run_id = upload_sensitivity_run(client, project, name="diverged")
    body = arms()
    body[1]["heldout_loss"] = float("nan")  # all-low diverged
    body[3]["heldout_loss"] = "Infinity"  # and so did the recommended arm
    posted = post(client, EXPERIMENTS.format(run_id), {"arms": body})
    assert posted.status_code == 201, posted.text
    by_name = {arm["name"]: arm for arm in posted.json()["arms"]}
    assert by_name["all-nvfp4"]["diverged"] and by_name["all-nvfp4"]["heldout_loss"] is None
    verdict = posted.json()["verification"]
    assert verdict["status"] == "contradicted" and "diverged" in verdict["detail"]


def test_bad_experiments_are_4xx_and_store_nothing(client: TestClient, project: str) -> None:
    run_id = upload_sensitivity_run(client, project, name="bad")
    url = EXPERIMENTS.format(run_id)
    unequal = arms()
    unequal[2]["steps"] = 49
    nan_time = arms()
    nan_time[0]["step_time_s"] = float("nan")
    foreign = arms()
    foreign[3]["precisions"] = {"model.encoder.layers.1.fc1": "nvfp4", SENSITIVE: "bf16"}
    no_reference = [a for a in arms() if a["kind"] != "bf16"]
    cases = [
        ({"arms": arms(), "run_id": run_id + 1000}, "ExperimentForOtherRun"),
        ({"arms": arms(), "project": "someone-else"}, "ExperimentForOtherRun"),
        ({"arms": foreign}, "ExperimentForOtherRun"),
        ({"arms": unequal}, "UnequalSteps"),
        ({"arms": arms(), "steps": 10}, "UnequalSteps"),
        ({"arms": nan_time}, "NonFiniteNumber"),
        ({"arms": arms(), "tolerance": float("inf")}, "NonFiniteNumber"),
        ({"arms": no_reference}, "InvalidExperiment"),
        ({"arms": [{**arms()[0], "kind": "fp16"}, arms()[1]]}, "InvalidExperiment"),
        ({"arms": arms(), "extra": 1}, "InvalidExperiment"),
        ([1, 2], "InvalidExperiment"),
    ]
    for body, error in cases:
        response = post(client, url, body)
        assert response.status_code == 400 and response.json()["error"] == error, (body, response.text)
    assert client.get(url).json() == []
    assert client.post(EXPERIMENTS.format(10**6), json={"arms": arms()}).status_code == 404
