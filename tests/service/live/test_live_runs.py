"""Live runs: logs appended piece by piece at offsets (idempotent re-sends, refused gaps), early warnings from each
piece's new lines, and a finalized run equal to the same logs uploaded whole (both backends)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from fp8_policy.service.live import routes as live_routes
from tests.conftest import RUN_FIGURES, wait_for_run
from tests.support.archives import meta_relpath, metadata_log, stats_log, stats_relpath, tree_tar_gz, write_tree

LIVE = "/api/v1/live/runs"
RUNS = "/api/v1/runs"
LAYERS = [f"model.layers.{k}.mlp.fc2" for k in range(1, 5)]


def training_log(rank: int, steps: int = 60, rising_layer: str = LAYERS[-1], drop_at: int | None = 400) -> bytes:
    """What a training job writes: gradient underflows% per layer (one of them rising towards the critical band)
    and an activation scale_inv that collapses once, every 10 iterations."""
    points = []
    for step in range(steps):
        it = step * 10
        for layer in LAYERS:
            rising = layer == rising_layer and rank == 0
            points.append((f"{layer}_gradient_underflows%", it, round(0.1 + (0.005 * it if rising else 0.0), 4)))
            scale = 1e-2 if drop_at is None or it < drop_at or layer != LAYERS[0] else 1e-4
            points.append((f"{layer}_activation_scale_inv_min", it, scale))
    return stats_log(points)


def log_tree(root: Path, ranks: int = 2) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for rank in range(ranks):
        files[stats_relpath(rank)] = training_log(rank)
        files[meta_relpath(rank)] = metadata_log(dict.fromkeys(LAYERS, "fp8"))
    write_tree(root, files)
    return files


def create(client: TestClient, project: str, **fields) -> dict:
    response = client.post(LIVE, json={"project": project, "name": "live-test", **fields})
    assert response.status_code == 201, response.text
    return response.json()


def put(client: TestClient, run_id: int, path: str, offset: int, data: bytes):
    return client.put(
        f"{LIVE}/{run_id}/files/{path}",
        params={"offset": offset},
        content=data,
        headers={"Content-Type": "application/octet-stream"},
    )


def appender(client: TestClient | httpx.Client, run_id: int) -> Callable[[str, bytes], dict]:
    """`send(path, data)`: appends `data` to the live run's file `path` where the last send ended; returns the
    response body."""
    sizes: dict[str, int] = {}

    def send(path: str, data: bytes) -> dict:
        response = put(client, run_id, path, sizes.get(path, 0), data)
        assert response.status_code == 200, response.text
        sizes[path] = response.json()["size"]
        return response.json()

    return send


def send_in_pieces(client: TestClient, run_id: int, path: str, data: bytes, pieces: int) -> list[dict]:
    """Pieces cut at arbitrary bytes (mid-line), as a tailer sends them; returns the events they raised."""
    events, offset = [], 0
    cuts = [len(data) * k // pieces + (7 if 0 < k < pieces else 0) for k in range(pieces + 1)]
    for lo, hi in zip(cuts, cuts[1:], strict=False):
        response = put(client, run_id, path, offset, data[lo:hi])
        assert response.status_code == 200, response.text
        offset = response.json()["size"]
        assert offset == hi
        events += response.json()["events"]
    return events


def test_a_live_run_starts_live_and_takes_pieces_at_offsets(client: TestClient, project: str) -> None:
    run = create(client, project, tags=["nightly"], metadata={"gpu": "H100"})
    assert run["status"] == "live" and run["tags"] == ["nightly"] and run["metadata"] == {"gpu": "H100"}
    path = stats_relpath(0)
    data = training_log(0, steps=5)

    first = put(client, run["id"], path, 0, data[:100])
    again = put(client, run["id"], path, 0, data[:100])  # a re-sent piece is harmless
    overlap = put(client, run["id"], path, 50, data[50:150])  # half old, half new

    assert first.json()["size"] == again.json()["size"] == 100
    assert overlap.status_code == 200 and overlap.json()["size"] == 150
    listed = client.get(f"{LIVE}/{run['id']}").json()
    assert listed["status"] == "live" and listed["files"][0]["path"] == path and listed["files"][0]["size"] == 150


def test_a_gap_is_refused_with_the_expected_offset(client: TestClient, project: str) -> None:
    run = create(client, project)
    path = stats_relpath(0)
    put(client, run["id"], path, 0, b"x" * 10)

    response = put(client, run["id"], path, 20, b"y" * 5)

    assert response.status_code == 409
    assert response.json()["error"] == "OffsetGap" and "offset 10" in response.json()["detail"]
    assert response.headers["Upload-Offset"] == "10"
    assert set(response.json()) == {"error", "detail"}


def test_different_bytes_at_a_received_offset_are_a_conflict(client: TestClient, project: str) -> None:
    run = create(client, project)
    path = stats_relpath(0)
    put(client, run["id"], path, 0, b"abcdef")

    response = put(client, run["id"], path, 2, b"XY")

    assert response.status_code == 409 and response.json()["error"] == "OffsetConflict"
    assert response.headers["Upload-Offset"] == "6"


@pytest.mark.parametrize(
    "path",
    [
        "../etc/passwd",
        "/abs/x.log",
        "rank_0/notes.txt",
        "a\\b.log",
        "rank_0/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log.gz",
    ],
)
def test_only_log_paths_are_accepted(client: TestClient, project: str, path: str) -> None:
    run = create(client, project)

    response = client.put(f"{LIVE}/{run['id']}/files/{path}", params={"offset": 0}, content=b"x")

    assert response.status_code in (400, 404), response.text  # 404: the router never matched (absolute path)
    if response.status_code == 400:
        assert response.json()["error"] == "InvalidLivePath"


def test_a_piece_larger_than_the_limit_is_413(client: TestClient, project: str, monkeypatch) -> None:
    run = create(client, project)
    monkeypatch.setattr(live_routes, "MAX_PIECE_BYTES", 64)

    response = put(client, run["id"], stats_relpath(0), 0, b"z" * 65)

    assert response.status_code == 413 and response.json()["error"] == "PieceTooLarge"


def test_unknown_run_is_404_and_a_finished_one_takes_no_more_bytes(
    client: TestClient, project: str, tmp_path: Path
) -> None:
    assert put(client, 10**9, stats_relpath(0), 0, b"x").status_code == 404
    run = create(client, project)
    data = training_log(0, steps=5)
    put(client, run["id"], stats_relpath(0), 0, data)
    assert client.post(f"{LIVE}/{run['id']}/finalize").status_code == 202

    response = put(client, run["id"], stats_relpath(0), len(data), b"more")

    assert response.status_code == 409 and response.json()["error"] == "NotLive"


def test_finalize_without_a_statistics_log_is_400(client: TestClient, project: str) -> None:
    run = create(client, project)
    put(client, run["id"], meta_relpath(0), 0, metadata_log({LAYERS[0]: "fp8"}))

    response = client.post(f"{LIVE}/{run['id']}/finalize")

    assert response.status_code == 400 and response.json()["error"] == "NoStatsLogs"


def test_planted_underflow_rise_and_scale_drop_raise_early_warnings(client: TestClient, project: str) -> None:
    run = create(client, project)

    events = send_in_pieces(client, run["id"], stats_relpath(0), training_log(0), pieces=12)

    kinds = {(e["kind"], e["layer"]) for e in events}
    assert ("scale_inv_drop", LAYERS[0]) in kinds
    assert ("projected_crossing", LAYERS[-1]) in kinds
    assert ("band_crossing", LAYERS[-1]) in kinds
    drop = next(e for e in events if e["kind"] == "scale_inv_drop")
    assert drop["iteration"] == 400 and drop["stat"] == "scale_inv_min" and drop["tensor"] == "activation"
    projected = next(e for e in events if e["kind"] == "projected_crossing")
    crossed = next(e for e in events if e["kind"] == "band_crossing" and e["severity"] == "critical")
    assert projected["iteration"] < crossed["iteration"]  # warned before it happened
    assert abs(projected["detail"]["projected_iteration"] - crossed["iteration"]) <= 60
    polled = client.get(f"{LIVE}/{run['id']}", params={"after": events[0]["id"]}).json()["events"]
    assert [e["id"] for e in polled] == [e["id"] for e in events[1:]]


def test_the_finalized_run_equals_the_same_logs_uploaded_whole(
    client: TestClient, project: str, tmp_path: Path
) -> None:
    files = log_tree(tmp_path / "tree")
    whole = client.post(
        RUNS,
        files={"file": ("run.tgz", tree_tar_gz(tmp_path / "tree"), "application/gzip")},
        data={"project": f"{project}-whole"},
    )
    whole_run = wait_for_run(client, whole.json()["id"])
    run = create(client, project)
    for path, data in files.items():
        send_in_pieces(client, run["id"], path, data, pieces=5)

    finalized = client.post(f"{LIVE}/{run['id']}/finalize")
    assert finalized.status_code == 202 and finalized.json()["status"] == "queued"
    live_run = wait_for_run(client, run["id"])

    assert live_run["status"] == whole_run["status"] == "ready", live_run["error"]
    for key in RUN_FIGURES:
        assert live_run[key] == whole_run[key], key
    csv_live = client.get(f"{RUNS}/{run['id']}/metrics.csv").content
    csv_whole = client.get(f"{RUNS}/{whole_run['id']}/metrics.csv").content
    assert csv_live == csv_whole
    assert client.get(f"{LIVE}/{run['id']}").json()["files"] == []  # the bytes live on in the stored archive


def test_deleting_a_live_run_removes_its_received_logs(client: TestClient, project: str, app_settings) -> None:
    run = create(client, project)
    put(client, run["id"], stats_relpath(0), 0, training_log(0, steps=3))
    received = app_settings.data_dir / "live" / str(run["id"])
    assert received.is_dir()

    assert client.delete(f"{RUNS}/{run['id']}").status_code == 204

    assert not received.exists()
