"""`POST|GET /api/v1/runs/{id}/experiments`: the round trip, the verdict in the recommendation, the frontier chart
with measured arms, and 4xx for bad input with nothing stored."""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from fp8_policy.db.experiment_models import ExperimentRow
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


def replicated(recommended: tuple[float, ...] = (2.775, 2.780, 2.770)) -> list[dict[str, Any]]:
    """`arms()` in three replicates (replicate r of every arm under the same seed): `heldout_losses`, no mean."""
    body = arms()
    spread = (0.0, 0.03, -0.02)  # the replicate's own data order moves every arm alike
    for arm in body:
        arm["heldout_losses"] = [arm["heldout_loss"] + d for d in spread]
        del arm["heldout_loss"]
    body[3]["heldout_losses"] = [loss + d for loss, d in zip(recommended, spread, strict=True)]
    return body


def test_replicated_arms_are_judged_paired_with_their_noise(client: TestClient, project: str) -> None:
    run_id = upload_sensitivity_run(client, project, name="replicated")
    body = {"name": "three seeds", "seed": 0, "seeds": [0, 1, 2], "arms": replicated()}
    body["arms"][0]["heldout_loss"] = 2.770 + 0.01 / 3  # a stated mean must agree with the replicates
    posted = post(client, EXPERIMENTS.format(run_id), body)
    assert posted.status_code == 201, posted.text
    experiment = posted.json()
    assert experiment["seeds"] == [0, 1, 2]
    by_name = {arm["name"]: arm for arm in experiment["arms"]}
    rec = by_name["recommended"]
    assert rec["heldout_losses"] == pytest.approx([2.775, 2.81, 2.75])
    assert rec["heldout_loss"] == pytest.approx((2.775 + 2.81 + 2.75) / 3)
    assert rec["heldout_gaps"] == pytest.approx([0.005, 0.01, 0.0])
    assert rec["gap_se"] == pytest.approx(0.005 / math.sqrt(3), rel=1e-4)
    assert by_name["bf16"]["heldout_gaps"] == [0.0, 0.0, 0.0] and by_name["bf16"]["gap_se"] == 0.0
    verdict = experiment["verification"]
    assert verdict["status"] == "confirmed" and verdict["replicates"] == 3, verdict
    assert verdict["recommended_gap"] == pytest.approx(0.005) and verdict["recommended_gap_se"] > 0
    # the rule arm moved with bf16 in every replicate: its paired differences spread as the recommended gaps do
    assert verdict["noise_bound"] > 0 and verdict["best_rule_noise_bound"] == verdict["noise_bound"]
    assert "over 3 replicates, within the one-sided 95 % noise bound" in verdict["detail"]
    shown = client.get(f"/api/v1/runs/{run_id}/recommendation").json()["verification"]
    assert shown["replicates"] == 3 and shown["noise_bound"] == verdict["noise_bound"]
    assert {m["name"]: m["gap_se"] for m in shown["measured"]}["recommended"] == rec["gap_se"]
    assert client.get(EXPERIMENTS.format(run_id)).json()[0]["arms"][3]["heldout_gaps"] == rec["heldout_gaps"]
    png = client.get(f"/api/v1/runs/{run_id}/frontier.png")  # the measured gaps drawn with ± their SE
    assert png.status_code == 200 and png.content[:8] == b"\x89PNG\r\n\x1a\n"
    svg = client.get(f"/api/v1/runs/{run_id}/frontier.svg")
    assert svg.status_code == 200 and "LineCollection" in svg.text  # matplotlib's error bars


def test_a_replicate_that_diverged_and_a_bf16_replicate_that_diverged(client: TestClient, project: str) -> None:
    run_id = upload_sensitivity_run(client, project, name="replicated-diverged")
    body = replicated()
    body[3]["heldout_losses"][1] = "NaN"
    posted = post(client, EXPERIMENTS.format(run_id), {"arms": body})
    assert posted.status_code == 201, posted.text
    rec = posted.json()["arms"][3]
    assert rec["diverged"] and rec["heldout_loss"] is None and rec["heldout_losses"][1] is None
    assert rec["heldout_gaps"][1] is None and rec["gap_se"] is None
    assert posted.json()["verification"]["status"] == "contradicted"
    body = replicated()
    body[0]["heldout_losses"][2] = float("inf")
    verdict = post(client, EXPERIMENTS.format(run_id), {"arms": body}).json()["verification"]
    assert verdict["status"] == "unverified" and "3 replicates" in verdict["detail"]


def test_unequal_replicates_are_400_and_store_nothing(client: TestClient, project: str) -> None:
    run_id = upload_sensitivity_run(client, project, name="bad-replicates")
    url = EXPERIMENTS.format(run_id)
    some = replicated()
    some[2] = arms()[2]  # one arm without replicates
    short = replicated()
    short[1]["heldout_losses"] = short[1]["heldout_losses"][:2]
    wrong_mean = replicated()
    wrong_mean[3]["heldout_loss"] = 2.9
    diverged_mean = replicated()
    diverged_mean[3]["heldout_losses"][0] = "NaN"
    diverged_mean[3]["heldout_loss"] = 2.775
    one = arms()
    one[0]["heldout_losses"] = [2.77]
    text = replicated()
    text[0]["heldout_losses"][0] = "2.77"
    cases = [
        ({"arms": some}, "UnequalReplicates"),
        ({"arms": short}, "UnequalReplicates"),
        ({"arms": replicated(), "seeds": [0, 1]}, "UnequalReplicates"),
        ({"arms": arms(), "seeds": [0, 1]}, "UnequalReplicates"),
        ({"arms": replicated(), "seeds": [0, 1, float("nan")]}, "NonFiniteNumber"),
        ({"arms": replicated(), "seeds": [0, 1, 2.5]}, "InvalidExperiment"),
        ({"arms": replicated(), "seeds": "0,1,2"}, "InvalidExperiment"),
        ({"arms": wrong_mean}, "InvalidExperiment"),
        ({"arms": diverged_mean}, "InvalidExperiment"),
        ({"arms": one}, "InvalidExperiment"),
        ({"arms": text}, "InvalidExperiment"),
    ]
    for body, error in cases:
        response = post(client, url, body)
        assert response.status_code == 400, (body, response.text)
        answer = response.json()
        assert set(answer) == {"error", "detail"} and answer["error"] == error, (body, answer)
    assert "heldout_losses of the same length" in post(client, url, {"arms": some}).json()["detail"]
    assert client.get(url).json() == []


def test_an_experiment_stored_before_replicates_still_reads(
    client: TestClient, project: str, db_engine: Engine
) -> None:
    run_id = upload_sensitivity_run(client, project, name="old-style")
    posted = client.post(EXPERIMENTS.format(run_id), json={"arms": arms()})
    assert posted.status_code == 201, posted.text
    with Session(db_engine) as session:  # the body as it was stored before replicates existed
        row = session.get(ExperimentRow, posted.json()["id"])
        assert row is not None
        old = dict(row.body)
        old["arms"] = [{k: v for k, v in arm.items() if k not in ("heldout_gaps", "gap_se")} for arm in old["arms"]]
        keys = ("replicates", "noise_bound", "best_rule_noise_bound", "recommended_gap_se")
        old["verification"] = {k: v for k, v in old["verification"].items() if k not in keys}
        old.pop("seeds", None)
        row.body = old
        session.commit()
    listed = client.get(EXPERIMENTS.format(run_id))
    assert listed.status_code == 200, listed.text
    arm = listed.json()[0]["arms"][3]
    assert arm["heldout_gaps"] is None and arm["gap_se"] is None and arm["heldout_gap"] == 0.005
    shown = client.get(f"/api/v1/runs/{run_id}/recommendation").json()["verification"]
    assert shown["status"] == "confirmed" and shown["replicates"] is None and shown["noise_bound"] is None
    assert "LineCollection" not in client.get(f"/api/v1/runs/{run_id}/frontier.svg").text  # no error bars
