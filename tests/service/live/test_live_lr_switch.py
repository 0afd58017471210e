"""A live run's streamed `lr` (scalars.jsonl) in the precision schedule: a run started with a schedule whose phase
starts at the LR decay raises `switch_now` from its scalars when its own curve shows the decay (long before the
planned step); once finalized, its ingest reads the streamed scalars it kept (report `scalars.streamed`), so the
recommendation's LR phase starts where that curve decays (policy/live/switch.py, service/ingest/scalars.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient

from tests.conftest import wait_for_run
from tests.policy.recommend.test_mixed_format import METADATA, SUBS, _mxfp8_layer, _name, _nvfp4_layer
from tests.policy.te_logs import write_tree
from tests.service.live.test_live_runs import LIVE, appender, create
from tests.service.scalars.test_lr_from_scalars import wsd  # warm-up, stable to 300, linear decay to 500

SCHEDULE = [{"from_step": 0}, {"from_step": 9000, "triggers": [], "lr_decay": True}]


def scalars(steps: range) -> bytes:
    return "".join(json.dumps({"step": s, "loss": 3.0, "lr": wsd(s)}) + "\n" for s in steps).encode()


def switches(body: dict) -> list[dict]:
    return [e for e in body["events"] if e["kind"] == "switch_now"]


def test_the_streamed_lr_decay_raises_switch_now_and_reaches_the_finalized_runs_schedule(
    client: TestClient, project: str, tmp_path: Path
) -> None:
    run = create(client, project, metadata={**METADATA, "schedule": SCHEDULE})
    send = appender(client, run["id"])
    rng = np.random.default_rng(3)
    layers = [(_nvfp4_layer if b <= 4 else _mxfp8_layer)(_name(b, s), rng) for b in range(1, 9) for s in SUBS]
    root = write_tree(tmp_path / "tree", layers, np.arange(40) * 10)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):  # meta log, then stats up to step 390
        assert not switches(send(str(path.relative_to(root.parent)), path.read_bytes()))
    assert not switches(send("scalars.jsonl", scalars(range(0, 300))))  # warm-up and the stable phase
    (event,) = switches(send("scalars.jsonl", scalars(range(300, 400))))
    assert event["detail"] == {"phase": 1, "from_step": 9000, "reason": "lr", "lr_decay_start": 300}
    assert event["iteration"] == 300 and "streamed lr curve" in event["message"]
    assert not switches(send("scalars.jsonl", scalars(range(400, 420))))  # once per phase

    assert client.post(f"{LIVE}/{run['id']}/finalize").status_code == 202
    done = wait_for_run(client, run["id"])
    assert done["status"] == "ready", done.get("error")
    report = done["ingest_report"]["scalars"]
    assert report["streamed"] is True and report["kept"] and report["lr"]["decay_start"] == 300
    phases = client.get(f"/api/v1/runs/{run['id']}/recommendation").json()["schedule"]
    assert [p["from_step"] for p in phases] == [0, 300] and phases[1]["lr_decay"] is True
    assert "detected in the run's scalars.jsonl lr curve" in phases[1]["reason"]
    served = client.get(f"{LIVE}/{run['id']}/scalars").json()
    assert served["records"] == 420  # the stored scalars are left as finalize kept them
