"""A live run keeps its story once finalized: the training scalars (stored with the run, served by any API process)
and the whole event timeline (paged); one event per (layer, kind) of a piece; a 3x loss jump is a spike."""

from __future__ import annotations

import json
import shutil

import numpy as np
from fastapi.testclient import TestClient

from fp8_policy.service.storage.archive import store_for
from fp8_policy.service.storage.keys import scalars_key
from tests.conftest import wait_for_run
from tests.support.archives import meta_relpath, metadata_log, stats_log, stats_relpath

LIVE = "/api/v1/live/runs"
LAYERS = [f"model.layers.{k}.mlp.fc2" for k in range(1, 5)]
TENSORS = ("activation", "weight", "gradient")
SCALE_STATS = ("scale_inv_min", "scale_inv_max")


def create(client: TestClient, project: str) -> dict:
    response = client.post(LIVE, json={"project": project, "name": "story"})
    assert response.status_code == 201, response.text
    return response.json()


def put(client: TestClient, run_id: int, path: str, offset: int, data: bytes) -> dict:
    response = client.put(
        f"{LIVE}/{run_id}/files/{path}",
        params={"offset": offset},
        content=data,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert response.status_code == 200, response.text
    return response.json()


def scale_jump_log(steps: range, jump_at: int = 400) -> bytes:
    """Every 10 iterations: gradient underflows% per layer, and every scaling factor (3 tensors x min/max) of the
    first layer dropping 100x at once at `jump_at` (a loss-scale change moves them all)."""
    points = []
    for step in steps:
        it = step * 10
        for layer in LAYERS:
            points.append((f"{layer}_gradient_underflows%", it, 0.1))
            for tensor in TENSORS:
                for stat in SCALE_STATS:
                    scale = 1e-4 if layer == LAYERS[0] and it >= jump_at else 1e-2
                    points.append((f"{layer}_{tensor}_{stat}", it, scale))
    return stats_log(points)


def loss_records(steps: np.ndarray, spike_at: int | None = None) -> bytes:
    rng = np.random.default_rng(3)
    loss = (2.0 + 9.0 * (1.0 + steps / 40.0) ** -0.8) * (1.0 + rng.normal(0.0, 0.03, len(steps)))
    if spike_at is not None:
        loss[int(np.flatnonzero(steps == spike_at)[0])] = 11.7
    grad = 1.0 + rng.normal(0.0, 0.05, len(steps))
    return "".join(
        json.dumps({"step": int(s), "loss": float(v), "grad_norm": float(g), "lr": 1e-4}) + "\n"
        for s, v, g in zip(steps, loss, grad, strict=True)
    ).encode()


def test_one_scale_jump_on_every_tensor_and_stat_is_one_event(client: TestClient, project: str) -> None:
    run = create(client, project)

    events = put(client, run["id"], stats_relpath(0), 0, scale_jump_log(range(60)))["events"]

    drops = [e for e in events if e["kind"] == "scale_inv_drop"]
    assert len(drops) == 1, [e["message"] for e in drops]
    drop = drops[0]
    assert drop["layer"] == LAYERS[0] and drop["iteration"] == 400 and drop["detail"]["series"] == 6
    assert {(m["tensor"], m["stat"]) for m in drop["detail"]["members"]} == {
        (t, s) for t in TENSORS for s in SCALE_STATS
    }


def test_a_3x_loss_jump_at_step_300_raises_a_scalar_spike(client: TestClient, project: str) -> None:
    run = create(client, project)
    text = loss_records(np.arange(0, 600), spike_at=300)
    cut = text.index(b'{"step": 310,')

    events = put(client, run["id"], "scalars.jsonl", 0, text[:cut])["events"]
    events += put(client, run["id"], "scalars.jsonl", cut, text[cut:])["events"]

    assert [(e["kind"], e["tensor"], e["iteration"], e["value"]) for e in events] == [
        ("scalar_spike", "loss", 300, 11.7)
    ]


def test_scalars_and_events_stay_with_the_finalized_run(client: TestClient, project: str, app_settings) -> None:
    run = create(client, project)
    put(client, run["id"], meta_relpath(0), 0, metadata_log(dict.fromkeys(LAYERS, "fp8")))
    raised = put(client, run["id"], stats_relpath(0), 0, scale_jump_log(range(60)))["events"]
    put(client, run["id"], "scalars.jsonl", 0, loss_records(np.arange(0, 400, 10)))

    assert client.post(f"{LIVE}/{run['id']}/finalize").status_code == 202
    assert wait_for_run(client, run["id"])["status"] == "ready"
    # another API process (or a cleaned data directory) has no received files: the run's own copy answers
    shutil.rmtree(app_settings.data_dir / "live" / str(run["id"]), ignore_errors=True)

    scalars = client.get(f"{LIVE}/{run['id']}/scalars").json()
    assert scalars["records"] == 40 and scalars["series"]["loss"]["steps"] == list(range(0, 400, 10))
    timeline = client.get(f"{LIVE}/{run['id']}/events").json()
    assert timeline["total"] == len(raised) > 0 and timeline["next_before"] is None
    assert [e["id"] for e in timeline["events"]] == sorted((e["id"] for e in raised), reverse=True)
    store = store_for(app_settings)
    assert store.exists(scalars_key(run["id"]))

    assert client.delete(f"/api/v1/runs/{run['id']}").status_code == 204
    assert not store.exists(scalars_key(run["id"]))  # deleted with the run


def test_the_timeline_pages_through_every_event(client: TestClient, project: str) -> None:
    run = create(client, project)
    raised, offset = [], 0
    for start in range(0, 200, 20):  # a piece per 20 logged iterations, each layer crossing bands in turn
        points = []
        for step in range(start, start + 20):
            for k, layer in enumerate(LAYERS):
                points.append((f"{layer}_gradient_underflows%", step * 10, 0.05 * step * (k + 1)))
        piece = stats_log(points)
        raised += put(client, run["id"], stats_relpath(0), offset, piece)["events"]
        offset += len(piece)
    assert len(raised) > 7

    seen, before = [], None
    while True:
        params = {"limit": 3, **({"before": before} if before else {})}
        page = client.get(f"{LIVE}/{run['id']}/events", params=params).json()
        assert page["total"] == len(raised) and len(page["events"]) <= 3
        seen += page["events"]
        before = page["next_before"]
        if before is None:
            break
    assert [e["id"] for e in seen] == sorted((e["id"] for e in raised), reverse=True)
    assert client.get(f"{LIVE}/999999/events").status_code == 404
