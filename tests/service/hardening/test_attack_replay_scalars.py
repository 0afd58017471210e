"""Attack replay, training scalars (SQLite and PostgreSQL): what once went wrong when the `scalars.jsonl` of an
uploaded archive or a live run, and the routes that serve it, were attacked on loopback, replayed against the app.

* A JSON integer too large for a float (`"loss": 999...9`, 400 digits) was a record: every read of the run's
  scalars (`GET /live/runs/{id}/scalars`, `/compare/scalars`) answered 500 (OverflowError in `math.isfinite`),
  and so did the live PUT that carried it (the spike detector). A step of 10**20 was an integer step: the
  compare overlay's int64 axis answered 500. Now an integer past 18 digits reads as the float it is nearest
  (inf past 1e308): such a value is left out like any non-finite one, such a step is no integer step (the line
  is named in ScalarsPartlyUnreadable).
* A run deleted while its plan job read the scalars member kept them: the job stored `runs/<id>/scalars.jsonl`
  after the delete had removed the run's files, and nothing removed it again. On SQLite, where a deleted
  highest id is given out again, the next upload's run served the deleted run's scalars. Now the plan job that
  finds its run deleted deletes what it kept.
* Steps out of order or logged again (a job resumed from an earlier checkpoint logs those steps a second time)
  were served as written: the run page's curves took their x range from the first and last step and drew lines
  back and forth. Now a run's scalars are served in step order, a step by its last record (as the compare
  overlay already took it).
* A live run's streamed `scalars.jsonl` has no size bound (an upload's is kept only within MAX_SCALARS_BYTES),
  and every read of the run's scalars read the whole file and parsed every line: one upload token appending a
  few GiB made each GET of the run page's curves (read scope) hold them all in memory. Now a read takes the
  whole lines of the file's last MAX_SCALARS_BYTES.
* A live `scalars.jsonl` line that never ends (no newline, piece after piece) was read again from its start with
  every piece by the spike detector: memory and time grew with the line, quadratic over the pieces. Now a
  pending line past MAX_LINE_BYTES (no record is that long) is skipped.
* A scalars member whose own gzip was damaged (cut short, a bad CRC) failed the whole run (CorruptArchive),
  though the same archive was ready before scalars were read and "a bad scalars file never fails the run". Now
  it is ScalarsUnreadable in the report, nothing kept; an archive cut short inside that member still fails.

The race is forced, not hoped for: the plan job is held by a hook right after it read the scalars member, the
run is deleted, and the hold is released; every wait is bounded.
"""

from __future__ import annotations

import gzip

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from fp8_policy.db.live_models import LiveFile
from fp8_policy.policy.parse import scalars_file
from fp8_policy.service.ingest import scalars as ingest_scalars
from fp8_policy.service.settings import Settings
from fp8_policy.service.storage.archive import store_for
from fp8_policy.service.storage.keys import scalars_key
from tests.conftest import wait_for_run
from tests.service.hardening.test_attack_replay_live import HOLD_SECONDS, IDLE_SECONDS, Hold, rows_left
from tests.service.live.test_live_runs import create, put
from tests.service.scalars.test_uploaded_scalars import SCALARS, logs, records, upload
from tests.support.archives import tar_bytes, zip_bytes

HUGE = b"9" * 400  # a JSON integer no float holds
OUT_OF_RANGE = [
    b'{"step": 5, "loss": ' + HUGE + b', "grad_norm": -' + HUGE + b', "lr": 1e999}\n',
    b'{"step": 100000000000000000000, "loss": 1.0}\n',
]


def test_numbers_too_large_for_a_float_are_left_out_not_a_500(client: TestClient, project: str) -> None:
    text = records(range(5)) + b"".join(OUT_OF_RANGE) + records(range(6, 10))
    run = upload(client, project, tar_bytes({**logs(), "scalars.jsonl": text}))

    report = run["ingest_report"]["scalars"]
    assert run["status"] == "ready" and report["kept"] and report["steps"] == [0, 9]
    assert report["records"] == 10 and report["unreadable_lines"] == 1  # the step of 10**20 is no integer step
    assert report["warning"].startswith("ScalarsPartlyUnreadable: 1 of 11 lines")
    served = client.get(SCALARS.format(run["id"]))
    assert served.status_code == 200, served.text
    loss = served.json()["series"]["loss"]
    assert loss["steps"] == [0, 1, 2, 3, 4, 6, 7, 8, 9]  # step 5's loss is left out like a NaN would be

    other = upload(client, project, tar_bytes({**logs(), "scalars.jsonl": records(range(10))}))
    for name in ("loss", "grad_norm", "lr"):
        compared = client.get("/api/v1/compare/scalars", params={"runs": f"{run['id']},{other['id']}", "name": name})
        assert compared.status_code == 200, compared.text
        assert compared.json()["iterations"] == list(range(10))


def test_a_live_run_streaming_such_numbers_is_no_500(client: TestClient, project: str) -> None:
    run = create(client, project)
    text = records(range(5)) + b"".join(OUT_OF_RANGE) + records(range(6, 30))

    sent = put(client, run["id"], "scalars.jsonl", 0, text)
    assert sent.status_code == 200, sent.text
    served = client.get(SCALARS.format(run["id"]))
    assert served.status_code == 200, served.text
    assert served.json()["unreadable_lines"] == 1 and len(served.json()["series"]["loss"]["steps"]) == 29


def test_a_run_deleted_while_its_plan_job_reads_the_scalars_keeps_none_of_them(
    client: TestClient, project: str, app_settings: Settings, db_engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    hold = Hold()
    monkeypatch.setattr(ingest_scalars.ScalarsReader, "read", hold.wrap(ingest_scalars.ScalarsReader.read))
    body = tar_bytes({**logs(), "scalars.jsonl": records(range(50))})
    accepted = client.post("/api/v1/runs", data={"project": project}, files={"file": ("logs.tar.gz", body)})
    assert accepted.status_code == 202, accepted.text
    run_id = accepted.json()["id"]
    assert hold.entered.wait(HOLD_SECONDS), "the plan job never read the scalars member"

    assert client.delete(f"/api/v1/runs/{run_id}").status_code == 204
    hold.release()
    client.app.state.ingest.wait_idle(timeout=IDLE_SECONDS)

    assert client.get(f"/api/v1/runs/{run_id}").status_code == 404
    assert rows_left(db_engine, run_id) == {}
    assert not store_for(app_settings).exists(scalars_key(run_id))
    assert not list((app_settings.data_dir / "work").glob("scalars-*"))
    # the next run (on SQLite it may get the deleted run's id) shows no scalars it was not sent
    monkeypatch.undo()
    fresh = upload(client, project, tar_bytes(logs()))
    assert client.get(SCALARS.format(fresh["id"])).json()["records"] == 0


def test_steps_out_of_order_or_logged_again_are_served_in_step_order_the_last_record_winning(
    client: TestClient, project: str
) -> None:
    # a job resumed from the checkpoint of step 6 logs steps 6..9 again; a careless writer appends steps 0..2 late
    text = records(range(3, 10)) + records(range(0, 3)) + b'{"step": 6, "loss": 0.5}\n{"step": 7, "loss": 0.25}\n'
    uploaded = upload(client, project, tar_bytes({**logs(), "scalars.jsonl": text}))
    live = create(client, project)
    assert put(client, live["id"], "scalars.jsonl", 0, text).status_code == 200

    for run in (uploaded, live):
        served = client.get(SCALARS.format(run["id"])).json()
        loss = served["series"]["loss"]
        assert served["records"] == 10 and loss["steps"] == list(range(10))
        assert loss["values"][6:8] == [0.5, 0.25] and loss["values"][0] == 10.0
        assert served["series"]["grad_norm"]["steps"] == [0, 1, 2, 3, 4, 5, 8, 9]  # 6, 7: their last records had none


def test_a_live_runs_scalars_past_the_bound_are_read_from_their_tail_only(
    client: TestClient, project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scalars_file, "MAX_SCALARS_BYTES", 4096)
    run = create(client, project)
    text = records(range(200))
    assert len(text) > 3 * 4096
    assert put(client, run["id"], "scalars.jsonl", 0, text).status_code == 200

    served = client.get(SCALARS.format(run["id"]))
    assert served.status_code == 200, served.text
    body = served.json()
    steps = body["series"]["loss"]["steps"]
    assert body["unreadable_lines"] == 0  # the line the bound cuts is left out, not counted as unreadable
    assert steps[-1] == 199 and steps == list(range(steps[0], 200)) and 0 < len(steps) < 200


def test_a_live_scalars_line_that_never_ends_is_skipped_not_read_again_with_every_piece(
    client: TestClient, project: str, db_engine
) -> None:
    run = create(client, project)
    endless = b'{"step": 0, "pad": "' + b"x" * (scalars_file.MAX_LINE_BYTES + 1)
    assert put(client, run["id"], "scalars.jsonl", 0, endless).status_code == 200
    # no record is this long: the detectors move past it instead of reading it again with each next piece
    assert parsed_offset(db_engine, run["id"]) == len(endless)

    rest = b"xx\n" + records(range(20))
    assert put(client, run["id"], "scalars.jsonl", len(endless), rest).status_code == 200
    assert parsed_offset(db_engine, run["id"]) == len(endless) + len(rest)
    served = client.get(SCALARS.format(run["id"])).json()
    assert served["records"] == 20 and served["unreadable_lines"] == 1


def parsed_offset(engine, run_id: int) -> int:
    with Session(engine) as session:
        row = session.scalars(select(LiveFile).where(LiveFile.run_id == run_id)).one()
        return row.parsed_offset


@pytest.mark.parametrize(
    ("name", "damaged"),
    [
        ("scalars.jsonl", gzip.compress(records(range(500)))[:200]),  # cut short
        ("scalars.jsonl.gz", gzip.compress(records(range(50)))[:-8] + bytes(8)),  # CRC and length zeroed
    ],
    ids=["truncated", "bad-crc"],
)
@pytest.mark.parametrize("container", ["tar.gz", "zip"])
def test_a_damaged_gzip_scalars_member_is_a_warning_not_a_failed_run(
    client: TestClient, project: str, app_settings: Settings, name: str, damaged: bytes, container: str
) -> None:
    files = {**logs(), name: damaged}
    body = tar_bytes(files) if container == "tar.gz" else zip_bytes(files)
    run = upload(client, project, body, f"logs.{container}")

    assert run["status"] == "ready", run.get("error")
    report = run["ingest_report"]["scalars"]
    assert report["kept"] is False and report["warning"].startswith(f"ScalarsUnreadable: {name} cannot be read")
    assert not store_for(app_settings).exists(scalars_key(run["id"]))
    assert not list((app_settings.data_dir / "work").glob("scalars-*"))


def test_an_archive_cut_short_inside_its_scalars_member_still_fails(client: TestClient, project: str) -> None:
    body = tar_bytes({**logs(), "scalars.jsonl": records(range(20_000))})
    response = client.post("/api/v1/runs", data={"project": project}, files={"file": ("logs.tar.gz", body[:-300])})
    run = wait_for_run(client, response.json()["id"])

    assert run["status"] == "failed" and run["error"].startswith("CorruptArchive")
