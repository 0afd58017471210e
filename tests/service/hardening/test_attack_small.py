"""Attack replay, the smaller holes (SQLite and PostgreSQL), each as it was found and as it is answered now:

* a 26 KB upload whose `scalars.jsonl.gz` holds 11 M tiny lines kept the ingest worker busy ~60 s (the ratio
  check starts at 64 MiB): now the member's lines are counted as it is decompressed, and past 1 M it is refused;
* a SIGKILL while finalize packed left `uploads/live-<id>-*.tar` for ever: now it is a held `.part`, swept at start;
* bidi controls and unnormalised combining characters in names, tags and notes (`"\\u202eevil"` showed as "live"
  beside the status badge): refused, and labels stored in NFC;
* webhook rules with numeric IPv4 forms (`http://2852039166/` is 169.254.169.254) were created though never
  deliverable: now refused at creation;
* a 500 reset the kept-alive connection without `Connection: close` and lacked `nosniff`;
* a NaN or infinite loss in live scalars raised no event: now `nonfinite`.
"""

from __future__ import annotations

import fcntl
import gzip
import json
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from fp8_policy.service.app import create_app
from fp8_policy.service.live import actions as live_actions
from fp8_policy.service.runs import actions as run_actions
from fp8_policy.service.settings import Settings
from fp8_policy.service.storage.disk import sweep_stale_parts
from tests.service.live.test_live_runs import LAYERS, create, put, training_log
from tests.service.scalars.test_uploaded_scalars import logs, upload
from tests.support.archives import meta_relpath, metadata_log, stats_relpath, tar_bytes
from tests.support.dbutil import insert_run

RUNS = "/api/v1/runs"


def test_a_scalars_line_count_bomb_is_refused_before_its_lines_are_read(
    client: TestClient, project: str, app_settings: Settings
) -> None:
    bomb = gzip.compress(b"1\n" * 11_000_000, compresslevel=9)
    assert len(bomb) < 64 * 1024  # what the attack uploaded: far below any ratio check

    run = upload(client, project, tar_bytes({**logs(), "scalars.jsonl.gz": bomb}))

    assert run["status"] == "ready"
    report = run["ingest_report"]["scalars"]
    assert report["kept"] is False and "more than 1,000,000 lines" in report["warning"]
    assert not list((app_settings.data_dir / "work").glob("scalars-*"))


def test_finalize_packs_into_a_held_part_and_a_killed_ones_is_swept_at_start(
    client: TestClient, project: str, app_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    uploads = app_settings.data_dir / "uploads"
    seen: list[str] = []
    real = live_actions.store_upload_file

    def store(session: Any, data_dir: Path, archive: Any, run_id: int, received: Any) -> str:
        seen.append(received.path.name)
        # another descriptor: the finalize's lock is held
        with open(received.path, "rb") as other, pytest.raises(BlockingIOError):
            fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert sweep_stale_parts(uploads) == []  # a start-up of another process would leave it alone
        return real(session, data_dir, archive, run_id, received)

    monkeypatch.setattr(live_actions, "store_upload_file", store)
    run = create(client, project)
    assert put(client, run["id"], stats_relpath(0), 0, training_log(0, steps=6)).status_code == 200
    assert put(client, run["id"], meta_relpath(0), 0, metadata_log(dict.fromkeys(LAYERS, "fp8"))).status_code == 200
    assert client.post(f"/api/v1/live/runs/{run['id']}/finalize").status_code == 202
    assert len(seen) == 1 and seen[0].startswith(f"live-{run['id']}-") and seen[0].endswith(".tar.part")
    assert not list(uploads.glob("live-*"))

    left = [uploads / "live-7-0123abcd.tar.part", uploads / "scalars-7-x1y2.part"]  # a SIGKILLed process's
    for path in left:
        path.write_bytes(b"half a tar")
    with TestClient(create_app(app_settings)):
        assert not [path for path in left if path.exists()]


BIDI = ["\u202eevil", "a\u202ab", "x\u2066y\u2069", "\u202dforced"]


class TestText:
    @pytest.mark.parametrize("value", BIDI)
    def test_bidi_controls_are_refused_in_names_projects_tags_and_notes(
        self, client: TestClient, db_engine: Engine, project: str, value: str
    ) -> None:
        run_id = insert_run(db_engine, project, status="ready")
        refused = [
            client.post(RUNS, data={"project": project, "name": value}, files={"file": ("l.tar", tar_bytes(logs()))}),
            client.post(RUNS, data={"project": value}, files={"file": ("l.tar", tar_bytes(logs()))}),
            client.post("/api/v1/live/runs", json={"project": project, "tags": ["ok", value]}),
            client.patch(f"{RUNS}/{run_id}", json={"notes": f"first line\n{value}"}),
            client.patch(f"{RUNS}/{run_id}", json={"tags": [value]}),
        ]
        for answer in refused:
            assert answer.status_code == 400, answer.text
            assert "bidirectional control" in answer.json()["detail"]
        with db_engine.connect() as connection:
            assert (
                connection.execute(text("SELECT count(*) FROM runs WHERE project = :p"), {"p": project}).scalar() == 1
            )

    @pytest.mark.parametrize("value", ["\u0301abc", "a" + "\u0300\u0301" * 5])  # NFC leaves 9 in a row
    def test_a_leading_or_piled_up_combining_mark_is_refused(
        self, client: TestClient, project: str, value: str
    ) -> None:
        run_id = upload(client, project, tar_bytes(logs()))["id"]
        for body in ({"tags": [value]}, {"notes": value}):
            answer = client.patch(f"{RUNS}/{run_id}", json=body)
            assert answer.status_code == 400 and "combining mark" in answer.json()["detail"], answer.text

    def test_labels_and_notes_are_stored_in_nfc_and_found_by_either_spelling(
        self, client: TestClient, db_engine: Engine, project: str
    ) -> None:
        decomposed, composed = "cafe\u0301", "caf\u00e9"
        run_id = insert_run(db_engine, project)
        edited = client.patch(f"{RUNS}/{run_id}", json={"tags": [decomposed, composed, "ok"], "notes": decomposed})
        assert edited.status_code == 200, edited.text
        assert sorted(edited.json()["tags"]) == [composed, "ok"] and edited.json()["notes"] == composed
        for spelling in (decomposed, composed):
            found = client.get(RUNS, params={"project": project, "tag": spelling}).json()["items"]
            assert [r["id"] for r in found] == [run_id]
        named = client.post(
            RUNS,
            data={"project": project, "name": "x\u0301"},
            files={"file": ("l.tar", tar_bytes({**logs(), "n.txt": b"2"}))},
        )
        assert named.status_code == 202 and named.json()["name"] == unicodedata.normalize("NFC", "x\u0301")


@pytest.mark.parametrize(
    "url",
    [
        "http://2852039166:80/hook",  # 169.254.169.254
        "http://0xa9fea9fe/hook",
        "http://0x7f000001/",
        "http://127.1/",
        "http://0x7f.1/",
        "http://0177.0.0.1/",
    ],
)
def test_numeric_ipv4_webhook_hosts_are_refused_at_creation(
    client: TestClient, db_engine: Engine, project: str, url: str
) -> None:
    answer = client.post("/api/v1/alerts/rules", json={"project": project, "webhook": url})
    assert answer.status_code == 400 and answer.json()["error"] == "InvalidWebhook", answer.text
    with db_engine.connect() as connection:
        assert not connection.execute(text("SELECT id FROM alert_rules WHERE project = :p"), {"p": project}).all()


def test_a_500_closes_the_connection_and_is_nosniff(app_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(run_actions, "list_runs", broken)
    with TestClient(create_app(app_settings), raise_server_exceptions=False) as client:
        answer = client.get(RUNS)
    assert answer.status_code == 500
    assert answer.json() == {"error": "InternalError", "detail": "unexpected RuntimeError; see the service log"}
    assert answer.headers["connection"] == "close" and answer.headers["x-content-type-options"] == "nosniff"


def test_a_nan_or_infinite_loss_in_live_scalars_raises_an_event(client: TestClient, project: str) -> None:
    run = create(client, project)
    lines = [{"step": k, "loss": 2.0 - k / 100, "grad_norm": 1.0} for k in range(10)]
    lines += [
        {"step": 10, "loss": float("nan"), "grad_norm": 1.0},
        {"step": 11, "loss": 1.8, "grad_norm": float("inf")},
    ]
    body = "".join(json.dumps(line) + "\n" for line in lines).encode()

    answer = put(client, run["id"], "scalars.jsonl", 0, body)

    assert answer.status_code == 200, answer.text
    events = answer.json()["events"]  # one per (layer, kind) of a piece: policy/live/grouping.py
    assert [(e["kind"], e["severity"], e["layer"], e["tensor"], e["iteration"]) for e in events] == [
        ("nonfinite", "severe", "training", "loss", 10)
    ]
    assert events[0]["value"] is None and "loss is nan at step 10" in events[0]["message"]
    assert "grad_norm" in json.dumps(events[0]["detail"]["members"])
    timeline = client.get(f"/api/v1/live/runs/{run['id']}/events").json()
    assert timeline["total"] == 1
