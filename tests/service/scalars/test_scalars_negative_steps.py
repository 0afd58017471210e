"""Training steps count from 0: a scalars record with a negative `step` is skipped where the lines are parsed
(policy/parse/scalars_file.py), counted and named, never served (the run page's curves drew it at x < 0). An upload's
ingest report says `negative_steps` and ScalarsNegativeSteps; a live run's scalars read says `negative_steps`."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from tests.service.live.test_live_runs import LIVE, put
from tests.service.scalars.test_uploaded_scalars import SCALARS, logs, records, upload
from tests.support.archives import tar_bytes


def negative(steps: range) -> bytes:
    return "".join(json.dumps({"step": s, "loss": 5.0}) + "\n" for s in steps).encode()


def test_an_uploads_negative_steps_are_skipped_counted_and_named(client: TestClient, project: str) -> None:
    text = negative(range(-3, 0)) + records(range(20)) + b"not json\n"
    run = upload(client, project, tar_bytes({**logs(), "scalars.jsonl": text}))

    assert run["status"] == "ready", run.get("error")
    report = run["ingest_report"]["scalars"]
    assert report["kept"] and report["records"] == 20 and report["steps"] == [0, 19]
    assert report["negative_steps"] == 3 and report["unreadable_lines"] == 1
    assert "ScalarsNegativeSteps: 3 lines of scalars.jsonl have a step below 0" in report["warning"]
    assert "ScalarsPartlyUnreadable: 1 of 24 lines" in report["warning"]
    served = client.get(SCALARS.format(run["id"])).json()
    assert served["series"]["loss"]["steps"] == list(range(20))


def test_only_negative_steps_keep_nothing_and_say_why(client: TestClient, project: str) -> None:
    run = upload(client, project, tar_bytes({**logs(), "scalars.jsonl": negative(range(-5, 0))}))

    report = run["ingest_report"]["scalars"]
    assert not report["kept"] and report["negative_steps"] == 5
    assert report["warning"].startswith("ScalarsNegativeSteps: every step of scalars.jsonl is below 0")


def test_a_live_runs_negative_steps_are_not_served_and_counted(client: TestClient, project: str) -> None:
    run_id = client.post(LIVE, json={"project": project}).json()["id"]
    text = records(range(10)) + negative(range(-2, 0)) + records(range(10, 15))
    response = put(client, run_id, "scalars.jsonl", 0, text)
    assert response.status_code == 200, response.text

    served = client.get(SCALARS.format(run_id)).json()

    assert served["records"] == 15 and served["negative_steps"] == 2 and served["unreadable_lines"] == 0
    assert served["series"]["loss"]["steps"] == list(range(15))
