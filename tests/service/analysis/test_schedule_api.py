"""A recommendation with a schedule over HTTP: `schedule` in the JSON, `?phase=K` renders phase K with its restart
step, and a live run started with the schedule in its metadata raises `switch_now` when its statistics reach it."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from tests.service.analysis.test_analysis_api import upload_scenario
from tests.service.live.test_live_runs import appender, create
from tests.support.archives import stats_log, stats_relpath

RECOMMENDATION = "/api/v1/runs/{}/recommendation"


def test_the_schedule_and_its_phases_over_http(client: TestClient, tmp_path: Path, project: str) -> None:
    run_id = upload_scenario(client, tmp_path, project, "rising_trend")
    body = client.get(RECOMMENDATION.format(run_id)).json()
    schedule = body["schedule"]
    assert [p["from_step"] for p in schedule][0] == 0 and len(schedule) == 2 and schedule[1]["restart"] is True
    step = schedule[1]["from_step"]
    phase = client.get(RECOMMENDATION.format(run_id), params={"format": "te-yaml", "phase": 1})
    assert phase.status_code == 200 and f"Restart from the checkpoint at step {step}" in phase.text
    assert ".phase1." in phase.headers["content-disposition"]
    first = client.get(RECOMMENDATION.format(run_id), params={"format": "te-yaml", "phase": 0}).text
    assert "fp8_disabled_gemms" not in first and "fp8_disabled_layers" not in first  # the late layers still FP8
    whole = client.get(RECOMMENDATION.format(run_id), params={"format": "megatron"}).text
    assert "the recommendation also has a schedule" in whole and whole.startswith("#!/usr/bin/env bash\n")
    for params in ({"format": "json", "phase": 1}, {"format": "te-yaml", "phase": 5}):
        refused = client.get(RECOMMENDATION.format(run_id), params=params)
        assert refused.status_code == 400 and refused.json()["error"] == "InvalidParameter", params
    posted = client.post(RECOMMENDATION.format(run_id), params={"format": "te-yaml", "phase": 1}, json={})
    assert posted.status_code == 200 and f"step {step}" in posted.text


def test_a_live_run_following_a_schedule_raises_switch_now(client: TestClient, project: str) -> None:
    schedule = [
        {"from_step": 0},
        {"from_step": 300, "triggers": [{"layer": "model.layers.1.mlp.fc2", "tensor": "gradient", "level": 2.0}]},
    ]
    run = create(client, project, metadata={"schedule": schedule})
    send = appender(client, run["id"])
    name = "model.layers.1.mlp.fc2_gradient_underflows%"
    early = send(stats_relpath(0), stats_log([(name, it, 0.5) for it in range(0, 100, 10)]))
    assert not [e for e in early["events"] if e["kind"] == "switch_now"]
    hot = send(stats_relpath(0), stats_log([(name, it, 2.5) for it in range(100, 130, 10)]))
    (event,) = [e for e in hot["events"] if e["kind"] == "switch_now"]
    assert event["detail"]["reason"] == "trend" and event["iteration"] == 100
    later = send(stats_relpath(0), stats_log([(name, it, 2.5) for it in range(300, 330, 10)]))
    assert not [e for e in later["events"] if e["kind"] == "switch_now"]  # once per phase
