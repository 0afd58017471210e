"""A live run's streamed `scalars.jsonl` is bounded where it is written (SQLite and PostgreSQL): a piece that would
make it larger than MAX_LIVE_SCALARS_BYTES is refused whole with 413 ScalarsTooLarge, and nothing of it is kept
(not on disk, not in the acknowledged size); up to the bound, pieces and re-sent bytes are taken as before."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient

from fp8_policy.service.limits import MAX_LIVE_SCALARS_BYTES
from fp8_policy.service.live.actions import live_dir
from tests.service.live.test_live_runs import LIVE, put


def put_scalars(client: TestClient, run_id: int, offset: int, data: bytes) -> tuple[int, dict]:
    response = put(client, run_id, "scalars.jsonl", offset, data)
    return response.status_code, response.json()


def test_a_piece_past_the_bound_is_refused_whole(client: TestClient, project: str, app_settings) -> None:
    run_id = client.post(LIVE, json={"project": project}).json()["id"]
    records = "".join(json.dumps({"step": s, "loss": 2.0 + 1 / (1 + s)}) + "\n" for s in range(100)).encode()
    # the records, then one long unfinished line (no record: skipped) up to 10 bytes short of the bound
    first = records + b" " * (MAX_LIVE_SCALARS_BYTES - 10 - len(records))
    assert put_scalars(client, run_id, 0, first)[0] == 200
    disk = live_dir(Path(app_settings.data_dir), run_id) / "scalars.jsonl"

    status, body = put_scalars(client, run_id, len(first), b"\n" + b" " * 10)

    assert status == 413, body
    assert body["error"] == "ScalarsTooLarge" and str(MAX_LIVE_SCALARS_BYTES) in body["detail"]
    assert disk.stat().st_size == len(first)
    assert client.get(f"{LIVE}/{run_id}").json()["files"][0]["size"] == len(first)

    status, body = put_scalars(
        client, run_id, len(first) - 5, first[-5:] + b"\n" + b" " * 9
    )  # overlaps, ends at the bound
    assert (status, body["size"]) == (200, MAX_LIVE_SCALARS_BYTES)
    assert disk.stat().st_size == MAX_LIVE_SCALARS_BYTES
    assert put_scalars(client, run_id, MAX_LIVE_SCALARS_BYTES - 3, b"   ")[0] == 200  # re-sent bytes at the bound
    assert put_scalars(client, run_id, MAX_LIVE_SCALARS_BYTES, b"x")[0] == 413
    assert disk.stat().st_size == MAX_LIVE_SCALARS_BYTES
    assert client.get(f"{LIVE}/{run_id}/scalars").json()["records"] == 100
