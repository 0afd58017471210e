"""Rendered configs kept with their run (POST/GET /api/v1/runs/{id}/configs, GET .../configs/{config_id}): each
file byte for byte what GET .../recommendation?format= hands a training job, with the policy version and options
of the recommendation it came from, versioned per format; on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib

from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from fp8_policy.db.run_config_models import RunConfig
from fp8_policy.policy.policy_version import POLICY_VERSION
from tests.conftest import upload, wait_for_run
from tests.support.archives import stats_log

RUNS = "/api/v1/runs"
LAYERS = ("model.layers.0.mlp.fc1", "model.layers.1.mlp.fc1", "model.layers.1.self_attention.proj")


def ready_run(client: TestClient, project: str, *, seed: int = 0) -> int:
    points = [
        (f"{layer}_{tensor}_underflows%", it, (40.0 if layer.endswith("1.mlp.fc1") else 0.1) + seed + it / 1000)
        for layer in LAYERS
        for tensor in ("activation", "gradient", "weight")
        for it in range(0, 200, 10)
    ]
    response = upload(client, stats_log(points), project=project, content_type="text/plain", metadata='{"gpu": "H100"}')
    assert response.status_code == 202, response.text
    run = wait_for_run(client, response.json()["id"])
    assert run["status"] == "ready", run
    return int(run["id"])


def keep(client: TestClient, run_id: int, *formats: str, **body) -> dict:
    response = client.post(f"{RUNS}/{run_id}/configs", json={"formats": list(formats), **body})
    assert response.status_code == 201, response.text
    return {item["format"]: item for item in response.json()["items"]}


def test_a_kept_config_is_the_file_the_recommendation_hands_out(client: TestClient, project: str) -> None:
    run_id = ready_run(client, project)

    kept = keep(client, run_id, "te-yaml", "megatron", "json")

    for fmt, item in kept.items():
        handed = client.get(f"{RUNS}/{run_id}/recommendation", params={"format": fmt})
        stored = client.get(item["download"])
        assert stored.status_code == 200 and stored.content == handed.content, fmt
        assert item["sha256"] == hashlib.sha256(handed.content).hexdigest() == stored.headers["etag"].strip('"')
        assert (item["version"], item["new"], item["size"]) == (1, True, len(handed.content))
        assert item["policy_version"] == POLICY_VERSION == stored.headers["x-policy-version"]
        assert stored.headers["content-type"].startswith(handed.headers["content-type"].split(";")[0])
    json_answer = client.get(f"{RUNS}/{run_id}/recommendation").content
    assert {item["recommendation_sha256"] for item in kept.values()} == {hashlib.sha256(json_answer).hexdigest()}
    assert kept["te-yaml"]["filename"].endswith(".yaml")


def test_the_same_file_is_not_kept_twice_and_new_options_make_a_new_version(client: TestClient, project: str) -> None:
    run_id = ready_run(client, project, seed=1)
    first = keep(client, run_id, "te-yaml")["te-yaml"]

    again = keep(client, run_id, "te-yaml")["te-yaml"]
    newer = keep(client, run_id, "te-yaml", overrides={"te_version": "2.13"})["te-yaml"]

    assert (again["id"], again["new"]) == (first["id"], False)
    assert (newer["version"], newer["new"], newer["options"]) == (2, True, {"te_version": "2.13"})
    handed = client.post(f"{RUNS}/{run_id}/recommendation", params={"format": "te-yaml"}, json={"te_version": "2.13"})
    assert client.get(newer["download"]).content == handed.content
    listed = client.get(f"{RUNS}/{run_id}/configs").json()["items"]
    assert [(c["format"], c["version"]) for c in listed] == [("te-yaml", 2), ("te-yaml", 1)]
    assert client.get(f"{RUNS}/{run_id}/configs", params={"format": "hydra"}).json()["items"] == []


def test_bad_requests_keep_nothing(client: TestClient, project: str, db_engine: Engine) -> None:
    run_id = ready_run(client, project, seed=2)

    unknown = client.post(f"{RUNS}/{run_id}/configs", json={"formats": ["te-yaml", "pdf"]})
    bad_options = client.post(
        f"{RUNS}/{run_id}/configs", json={"formats": ["te-yaml"], "overrides": {"no_such_option": 1}}
    )
    none = client.post(f"{RUNS}/{run_id}/configs", json={"formats": []})
    missing_run = client.post(f"{RUNS}/999999999/configs", json={"formats": ["json"]})
    missing_config = client.get(f"{RUNS}/{run_id}/configs/999999999")

    assert (unknown.status_code, unknown.json()["error"]) == (400, "UnknownFormat")
    assert bad_options.status_code == 400 and set(bad_options.json()) == {"error", "detail"}
    assert (none.status_code, none.json()["error"]) == (400, "InvalidParameter")
    assert "formats" in none.json()["detail"]
    assert (missing_run.status_code, missing_config.status_code) == (404, 404)
    with Session(db_engine) as session:
        assert session.scalar(select(func.count()).select_from(RunConfig).where(RunConfig.run_id == run_id)) == 0


def test_a_run_that_is_not_ready_keeps_nothing_and_a_deleted_run_takes_its_configs(
    client: TestClient, project: str, db_engine: Engine
) -> None:
    from tests.support.dbutil import insert_run

    queued = insert_run(db_engine, project)
    refused = client.post(f"{RUNS}/{queued}/configs", json={"formats": ["json"]})
    run_id = ready_run(client, project, seed=3)
    keep(client, run_id, "json", "hydra")

    deleted = client.delete(f"{RUNS}/{run_id}")

    assert refused.status_code == 409
    assert deleted.status_code == 204
    with Session(db_engine) as session:
        assert session.scalar(select(func.count()).select_from(RunConfig).where(RunConfig.run_id == run_id)) == 0


def test_the_training_run_link_is_checked_stored_and_removed(client: TestClient, project: str) -> None:
    run_id = ready_run(client, project, seed=4)
    link = {"kind": "wandb", "ref": "team/fp8/abc123", "url": "https://wandb.ai/team/fp8/runs/abc123"}

    stored = client.patch(f"{RUNS}/{run_id}", json={"training_run": link})
    bad = [
        client.patch(f"{RUNS}/{run_id}", json={"training_run": body})
        for body in (
            {"kind": "tensorboard", "ref": "x"},
            {"kind": "mlflow", "ref": "abc", "url": "javascript:alert(1)"},
            {"kind": "mlflow", "ref": " "},
            {"kind": "mlflow", "ref": "abc", "extra": "1"},
            {"kind": "mlflow", "ref": "abc\n"},
        )
    ]
    listed = client.get(RUNS, params={"project": project}).json()["items"]
    removed = client.patch(f"{RUNS}/{run_id}", json={"training_run": None})

    assert stored.status_code == 200 and stored.json()["training_run"] == link
    assert [(r.status_code, r.json()["error"]) for r in bad] == [(400, "InvalidParameter")] * len(bad)
    assert [r["training_run"] for r in listed if r["id"] == run_id] == [link]  # the runs list shows it too
    assert removed.status_code == 200 and removed.json()["training_run"] is None
