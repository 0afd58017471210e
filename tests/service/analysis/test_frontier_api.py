"""`GET|POST .../recommendation?target=` over HTTP: the frontier in the JSON, a target re-solved from the stored run
(no re-ingest), which layers it changed, the rendered formats following it, and 4xx on junk."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.support.sensitivity_runs import HARMLESS, SENSITIVE, upload_sensitivity_run

REC = "/api/v1/runs/{}/recommendation"


def test_the_recommendation_carries_the_frontier_and_a_target_re_solves_it(client: TestClient, project: str) -> None:
    run_id = upload_sensitivity_run(client, project)
    base = client.get(REC.format(run_id))
    assert base.status_code == 200, base.text
    data = base.json()
    frontier = data["frontier"]
    assert frontier["available"] and frontier["points"][0]["speedup"] == 1.0
    assert [b["name"] for b in frontier["baselines"]] == ["last_15pct", "last_n_nvidia", "first_last", "all_low"]
    assert "model.output_layer" in frontier["baselines"][0]["bf16_layers"]
    ladder = data["precision_ladder"]["layers"]
    assert ladder[SENSITIVE]["precision"] == "mxfp8" and ladder[HARMLESS]["precision"] == "nvfp4"
    ingested = client.get(f"/api/v1/runs/{run_id}").json()["finished_at"]

    solved = client.get(REC.format(run_id), params={"target": "speedup:1.6"})
    assert solved.status_code == 200, solved.text
    answer = solved.json()
    target = answer["target"]
    assert target["spec"] == "speedup:1.6" and target["met"] and target["speedup"] >= 1.6
    assert answer["frontier"]["chosen"]["source"] == "target" and target["layers_changed"]
    changed = {c["layer"]: c["to"] for c in target["layers_changed"]}
    assert all(answer["precision_ladder"]["layers"][name]["precision"] == to for name, to in changed.items())
    assert set(answer["fp8_skip_layers"]) == {n for n, to in changed.items() if to == "bf16"}
    yaml = client.get(REC.format(run_id), params={"target": "speedup:1.6", "format": "te-yaml"})
    assert yaml.status_code == 200
    assert all(name in yaml.text for name in answer["fp8_skip_layers"])
    assert client.get(f"/api/v1/runs/{run_id}").json()["finished_at"] == ingested  # nothing re-ingested

    posted = client.post(REC.format(run_id), json={"target": "risk:0"})
    assert posted.status_code == 200 and posted.json()["target"]["speedup"] == 1.0


def test_junk_targets_are_400(client: TestClient, project: str) -> None:
    run_id = upload_sensitivity_run(client, project, name="junk")
    for bad in ("speedup", "speedup:fast", "speedup:nan", "speedup:1e9", "risk:-1", "x" * 200):
        response = client.get(REC.format(run_id), params={"target": bad})
        assert response.status_code == 400 and response.json()["error"] == "InvalidTarget", (bad, response.text)
    posted = client.post(REC.format(run_id), json={"target": 1.6})
    assert posted.status_code == 400 and posted.json()["error"] == "InvalidTarget"


def test_a_run_without_sensitivity_has_rules_but_refuses_a_target_with_409(client: TestClient, project: str) -> None:
    run_id = upload_sensitivity_run(client, project, with_sensitivity=False, name="plain")
    data = client.get(REC.format(run_id)).json()
    assert data["frontier"]["available"] is False and data["frontier"]["points"] == []
    assert all(b["predicted_risk"] is None for b in data["frontier"]["baselines"])
    response = client.get(REC.format(run_id), params={"target": "speedup:1.5"})
    assert response.status_code == 409 and response.json()["error"] == "NoSensitivity"
