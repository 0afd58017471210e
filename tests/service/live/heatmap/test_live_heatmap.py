"""A live run's heatmap.json grows with the pieces received, is answered from memory when nothing new arrived,
and equals the stored run's heatmap.json once finalized (rows, iterations, values)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from fp8_policy.service.live.heatmap.routes import live_heatmaps
from tests.conftest import wait_for_run
from tests.service.live.test_live_runs import LAYERS, LIVE, create, put, training_log
from tests.support.archives import meta_relpath, metadata_log, stats_relpath


def live_heatmap(client: TestClient, run_id: int, **params):
    return client.get(f"{LIVE}/{run_id}/heatmap.json", params=params)


def test_the_live_heatmap_grows_with_each_piece_and_matches_the_stored_one(client: TestClient, project: str) -> None:
    run = create(client, project)
    path = stats_relpath(0)
    data = training_log(0, steps=60)
    assert put(client, run["id"], meta_relpath(0), 0, metadata_log(dict.fromkeys(LAYERS, "fp8"))).status_code == 200

    waiting = live_heatmap(client, run["id"])
    assert waiting.status_code == 400 and waiting.json()["error"] == "NoData"

    half = data.rfind(b"\n", 0, len(data) // 2) + 1
    assert put(client, run["id"], path, 0, data[: half + 5]).status_code == 200  # a partial line is not drawn yet
    first = live_heatmap(client, run["id"], cells=200)
    assert first.status_code == 200, first.text
    body = first.json()
    assert [r["layer"] for r in body["rows"]] == LAYERS
    assert 0 < body["iterations"]["count"] < 60 and body["ranks"] == [0] and body["skip_layers"] is None
    assert body["iterations"]["last"] == (body["iterations"]["count"] - 1) * 10
    assert len(body["cells"]["values"]) == len(LAYERS)

    assert live_heatmap(client, run["id"], cells=200).json() == body  # nothing new: the same answer
    assert put(client, run["id"], path, half + 5, data[half + 5 :]).status_code == 200
    grown = live_heatmap(client, run["id"], cells=200).json()
    assert grown["iterations"] == {"first": 0, "last": 590, "count": 60}
    rising = grown["cells"]["values"][LAYERS.index(LAYERS[-1])]
    assert rising[-1] > rising[0]

    scale = live_heatmap(client, run["id"], tensor="activation", stat="scale_inv_min", cells=200).json()
    assert scale["cells"]["values"][0][-1] == 1e-4 and scale["cells"]["values"][1][-1] == 1e-2

    assert live_heatmap(client, run["id"], rank=3).json()["error"] == "InvalidParameter"
    assert live_heatmap(client, run["id"], stat="nope%").json()["error"] == "NoData"
    assert live_heatmap(client, run["id"], colour="red").json()["error"] == "UnknownParameter"
    assert live_heatmap(client, 10**9).status_code == 404

    finalized = client.post(f"{LIVE}/{run['id']}/finalize")
    assert finalized.status_code == 202, finalized.text
    assert wait_for_run(client, run["id"])["status"] == "ready"
    after = live_heatmap(client, run["id"])
    assert after.status_code == 409 and after.json()["error"] == "NotLive"
    stored = client.get(f"/api/v1/runs/{run['id']}/heatmap.json", params={"cells": 200, "show_skip": "false"}).json()
    for key in ("iterations", "cells", "vmax", "colormap"):
        assert grown[key] == stored[key], key
    # the same rows and numbers; the stored run's boxes are its analysis's verdicts (a live run has none yet)
    verdict_keys = ("severity", "boxed")
    assert [{k: v for k, v in r.items() if k not in verdict_keys} for r in grown["rows"]] == [
        {k: v for k, v in r.items() if k not in verdict_keys} for r in stored["rows"]
    ]
    assert {r["severity"] for r in grown["rows"]} == {None} and None not in {r["severity"] for r in stored["rows"]}
    summary_keys = ("critical", "boxed", "boxed_by")
    assert {k: v for k, v in grown["summary"].items() if k not in summary_keys} == {
        k: v for k, v in stored["summary"].items() if k not in summary_keys
    }
    assert (grown["summary"]["boxed_by"], stored["summary"]["boxed_by"]) == ("row level", "analysis verdict")


def test_a_poll_without_new_bytes_parses_nothing(client: TestClient, project: str, monkeypatch) -> None:
    run = create(client, project)
    data = training_log(0, steps=10)
    assert put(client, run["id"], stats_relpath(0), 0, data).status_code == 200
    assert live_heatmap(client, run["id"]).status_code == 200
    from fp8_policy.service.live.heatmap import actions as module

    def no_parse(*args, **kwargs):
        raise AssertionError("parsed again although no byte arrived")

    monkeypatch.setattr(module, "_parse_new_lines", no_parse)
    monkeypatch.setattr(module, "_layout", no_parse)
    assert live_heatmap(client, run["id"]).status_code == 200
    assert live_heatmaps.knows(run["id"])


def test_runs_of_two_services_with_the_same_id_are_not_mixed_up(tmp_path, client: TestClient, project: str) -> None:
    """The cache is per process; a run is known by its id, live folder and creation time (the suite's SQLite and
    PostgreSQL apps in one process gave a new run another run's parsed lines)."""
    from fp8_policy.service.errors import NoData
    from fp8_policy.service.live.heatmap.actions import LiveHeatmaps

    cache = LiveHeatmaps()
    run = create(client, project)
    assert put(client, run["id"], meta_relpath(0), 0, metadata_log(dict.fromkeys(LAYERS, "fp8"))).status_code == 200
    data = training_log(0, steps=20)
    assert put(client, run["id"], stats_relpath(0), 0, data).status_code == 200
    state = client.app.state
    from fp8_policy.db.live import LiveRepository
    from fp8_policy.db.session import session_scope
    from fp8_policy.service.live.actions import live_dir
    from fp8_policy.service.visual.params import HEATMAP_KEYS, parse_heatmap_params

    params = parse_heatmap_params({}, show_skip=False, allowed=HEATMAP_KEYS | {"cells"})
    with session_scope(state.session_factory) as session:
        files = LiveRepository(session).files(run["id"])
    root = live_dir(state.settings.data_dir, run["id"])
    full = cache.layout(run["id"], "then", root, files, params, 0)
    assert full["iterations"]["count"] == 20

    other_root = tmp_path / "other-service" / "live" / str(run["id"])  # same id, another service, nothing received
    other_root.mkdir(parents=True)
    metadata_only = [f for f in files if f.kind == "metadata"]
    (other_root / meta_relpath(0)).parent.mkdir(parents=True)
    (other_root / meta_relpath(0)).write_bytes((root / meta_relpath(0)).read_bytes())
    with pytest.raises(NoData):  # what the route answers as 400 NoData; keyed by id alone it drew 20 iterations
        cache.layout(run["id"], "now", other_root, metadata_only, params, 0)
