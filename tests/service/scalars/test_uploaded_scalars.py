"""An uploaded archive carries its training scalars in `scalars.jsonl` (root or one folder down): the ingest keeps
them with the run (the store key a finalized live run uses) and `GET /api/v1/live/runs/{id}/scalars` serves them
as it serves a live run's. A bad scalars file never fails the run and is never half-stored: the ingest report
names what is wrong (ScalarsTooLarge, ScalarsUnreadable, ScalarsPartlyUnreadable, ScalarsAmbiguous)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from fp8_policy.policy.parse import scalars_file
from fp8_policy.service.storage.archive import store_for
from fp8_policy.service.storage.keys import scalars_key
from tests.conftest import wait_for_run
from tests.support.archives import gz_bytes, meta_relpath, metadata_log, stats_log, stats_relpath, tar_bytes, zip_bytes

SCALARS = "/api/v1/live/runs/{}/scalars"
LAYER = "model.layers.1.mlp.fc2"


def logs(prefix: str = "") -> dict[str, bytes]:
    points = [(f"{LAYER}_gradient_underflows%", it, 0.1 + it / 1000) for it in range(0, 200, 10)]
    return {prefix + stats_relpath(0): stats_log(points), prefix + meta_relpath(0): metadata_log({LAYER: "fp8"})}


def records(steps: range) -> bytes:
    return "".join(
        json.dumps({"step": s, "loss": 10.0 / (1 + s), "grad_norm": 1.0 + s / 100, "lr": 3e-4 * min(1, s / 50)}) + "\n"
        for s in steps
    ).encode()


def upload(client: TestClient, project: str, body: bytes, name: str = "logs.tar.gz") -> dict:
    response = client.post("/api/v1/runs", data={"project": project}, files={"file": (name, body)})
    assert response.status_code == 202, response.text
    return wait_for_run(client, response.json()["id"])


@pytest.mark.parametrize(
    ("members", "name"),
    [
        (lambda: {**logs(), "scalars.jsonl": records(range(200))}, "logs.tar.gz"),
        (lambda: {**logs("job/"), "job/scalars.jsonl": records(range(200))}, "logs.tar.gz"),
        (lambda: {**logs(), "scalars.jsonl.gz": gz_bytes(records(range(200)))}, "logs.tar.gz"),
        (lambda: {**logs(), "scalars.jsonl": records(range(200))}, "logs.zip"),
    ],
    ids=["root", "one-folder-down", "gzipped", "zip"],
)
def test_an_uploaded_archive_keeps_its_scalars_and_serves_them_like_a_live_run(
    client: TestClient, project: str, app_settings, members, name
) -> None:
    files = members()
    body = zip_bytes(files) if name.endswith(".zip") else tar_bytes(files)
    run = upload(client, project, body, name)

    assert run["status"] == "ready", run.get("error")
    report = run["ingest_report"]["scalars"]
    assert report["kept"] and report["records"] == 200 and report["warning"] is None
    assert report["steps"] == [0, 199]
    assert run["ingest_report"]["archive"]["skipped_members"] == 0  # the scalars member is read, not skipped
    served = client.get(SCALARS.format(run["id"])).json()
    assert served["records"] == 200 and served["unreadable_lines"] == 0
    assert served["series"]["loss"]["steps"] == list(range(200))
    assert served["series"]["lr"]["values"][100] == pytest.approx(3e-4)
    assert set(served["series"]) == {"loss", "grad_norm", "lr"}

    store = store_for(app_settings)
    assert store.exists(scalars_key(run["id"]))
    assert client.delete(f"/api/v1/runs/{run['id']}").status_code == 204
    assert not store.exists(scalars_key(run["id"]))  # deleted with the run


def test_an_archive_without_scalars_says_so(client: TestClient, project: str) -> None:
    run = upload(client, project, tar_bytes(logs()))

    assert run["status"] == "ready" and run["ingest_report"]["scalars"] is None
    assert client.get(SCALARS.format(run["id"])).json() == {
        "run_id": run["id"],
        "records": 0,
        "unreadable_lines": 0,
        "negative_steps": 0,
        "series": {},
    }


def test_some_unreadable_lines_are_left_out_and_named(client: TestClient, project: str, app_settings) -> None:
    text = records(range(10)) + b"not json\n" + b'{"loss": 1.0}\n' + records(range(10, 20)) + b'{"step": 20, "lo'
    run = upload(client, project, tar_bytes({**logs(), "scalars.jsonl": text}))

    assert run["status"] == "ready"
    report = run["ingest_report"]["scalars"]
    assert report["kept"] and report["records"] == 20 and report["unreadable_lines"] == 3
    assert report["warning"].startswith("ScalarsPartlyUnreadable: 3 of 23 lines of scalars.jsonl")
    assert "line 11: 'not json'" in report["warning"]
    served = client.get(SCALARS.format(run["id"])).json()
    assert served["records"] == 20 and served["unreadable_lines"] == 0  # only the records were stored
    assert served["series"]["loss"]["steps"] == list(range(20))


@pytest.mark.parametrize(
    ("scalars", "code"),
    [
        (b"step,loss\n0,2.5\n1,2.4\n", "ScalarsUnreadable"),
        (b"", "ScalarsUnreadable"),
        (
            b'{"step": 1, "loss": 2.0, "pad": "' + b"x" * (scalars_file.MAX_LINE_BYTES + 10) + b'"}\n',
            "ScalarsUnreadable",
        ),
        (b"\xff\xfe\x00garbage" * 1000, "ScalarsUnreadable"),
    ],
    ids=["csv", "empty", "overlong-line", "binary"],
)
def test_a_malformed_scalars_file_is_a_named_warning_and_nothing_is_stored(
    client: TestClient, project: str, app_settings, scalars: bytes, code: str
) -> None:
    run = upload(client, project, tar_bytes({**logs(), "scalars.jsonl": scalars}))

    assert run["status"] == "ready"  # the FP8 statistics are fine: the run is not failed for its scalars
    report = run["ingest_report"]["scalars"]
    assert report["kept"] is False and report["warning"].startswith(f"{code}: ")
    assert not store_for(app_settings).exists(scalars_key(run["id"]))
    assert client.get(SCALARS.format(run["id"])).json()["records"] == 0
    assert not list((app_settings.data_dir / "work").glob("scalars-*"))  # no work copy left behind


def test_a_scalars_file_over_the_bound_is_not_kept(client: TestClient, project: str, app_settings, monkeypatch) -> None:
    monkeypatch.setattr(scalars_file, "MAX_SCALARS_BYTES", 4096)
    run = upload(client, project, tar_bytes({**logs(), "scalars.jsonl": records(range(500))}))

    assert run["status"] == "ready"
    report = run["ingest_report"]["scalars"]
    assert report["kept"] is False and report["warning"].startswith("ScalarsTooLarge: scalars.jsonl holds more than")
    assert not store_for(app_settings).exists(scalars_key(run["id"]))
    assert not list((app_settings.data_dir / "work").glob("scalars-*"))


def test_two_scalars_files_keep_neither(client: TestClient, project: str, app_settings) -> None:
    files = {**logs(), "scalars.jsonl": records(range(5)), "other/scalars.jsonl": records(range(5))}
    run = upload(client, project, tar_bytes(files))

    assert run["status"] == "ready"
    assert run["ingest_report"]["scalars"]["warning"].startswith("ScalarsAmbiguous: 2 scalars files")
    assert not store_for(app_settings).exists(scalars_key(run["id"]))


def test_a_scalars_file_deeper_down_is_an_ordinary_skipped_member(client: TestClient, project: str) -> None:
    run = upload(client, project, tar_bytes({**logs(), "a/b/scalars.jsonl": records(range(5))}))

    assert run["status"] == "ready" and run["ingest_report"]["scalars"] is None
    assert run["ingest_report"]["archive"]["skipped_members"] == 1


def test_a_failed_ingest_stores_no_scalars(client: TestClient, project: str, app_settings) -> None:
    # the scalars come first, then a statistics log that is not one: the run fails and keeps nothing
    body = tar_bytes([("scalars.jsonl", records(range(50))), (stats_relpath(0), b"\x00" * 64)])
    run = upload(client, project, body)

    assert run["status"] == "failed"
    assert not store_for(app_settings).exists(scalars_key(run["id"]))
