"""Failures that are the server's, on SQLite and PostgreSQL (issue 9): a full disk is the server's fault (507,
never 400) and never leaves a `.part` behind; `.part` files of a killed process are removed at start-up; a run that
failed for a server-side reason is retried by re-uploading its bytes or with `POST /api/v1/runs/{id}/retry`.
"""

from __future__ import annotations

import errno
import fcntl
import io
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event, update
from sqlalchemy.orm import Session

from fp8_policy.db.run_models import Run
from fp8_policy.service.app import create_app
from fp8_policy.service.ingest import pipeline
from fp8_policy.service.ingest import upload as upload_module
from fp8_policy.service.settings import Settings
from tests.conftest import wait_for_run
from tests.service.ingest.failing_uploads import GOOD, RUNS, latin1_tar, upload
from tests.support.archives import stats_relpath
from tests.support.dbutil import files_under, insert_run, row_counts, runs_of_project


class _FullDisk(io.RawIOBase):
    """A file that takes `room` bytes, then fails every write and its close with ENOSPC (as a full disk does)."""

    def __init__(self, path: str, mode: str, room: int) -> None:
        self.real = open(path, mode)  # noqa: SIM115 - closed in close()
        self.room = room

    def write(self, data) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.real.write(data)

    def fileno(self) -> int:
        return self.real.fileno()

    def close(self) -> None:
        if not self.real.closed:
            self.real.close()
            raise OSError(errno.ENOSPC, "No space left on device")  # the buffered flush on close fails too


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Uploads are written to a disk with 1 KiB left."""
    monkeypatch.setattr(upload_module, "open", lambda path, mode: _FullDisk(path, mode, 1024), raising=False)
    yield


def failed_for_lack_of_space(db_engine: Engine, run_id: int, **columns: int) -> None:
    """Leave the run as an ingest that ran out of disk leaves it: failed (ENOSPC), its layers and series gone."""
    with db_engine.begin() as connection:
        connection.execute(
            update(Run)
            .where(Run.id == run_id)
            .values(status="failed", error="InternalError: OSError: [Errno 28] No space left on device", **columns)
        )
        connection.exec_driver_sql(f"DELETE FROM series WHERE run_id = {run_id}")
        connection.exec_driver_sql(f"DELETE FROM layers WHERE run_id = {run_id}")


class TestFullDisk:
    @pytest.mark.parametrize("shape", ["multipart", "raw"])
    def test_enospc_while_receiving_is_507_and_leaves_no_part_file(
        self, client: TestClient, app_settings: Settings, db_engine: Engine, project: str, shape: str, full_disk: None
    ) -> None:
        data = GOOD * 200
        if shape == "multipart":
            response = upload(client, project, data, "run.log")
        else:
            response = client.post(
                RUNS, params={"project": project}, content=data, headers={"Content-Type": "text/plain"}
            )

        assert response.status_code == 507, response.text
        assert response.json()["error"] == "InsufficientStorage"
        assert runs_of_project(db_engine, project) == []
        assert files_under(app_settings.data_dir / "uploads") == set()

    def test_database_full_on_commit_is_507(self, client: TestClient, db_engine: Engine, project: str) -> None:
        def full(session: Session) -> None:
            if any(isinstance(obj, Run) and obj.project == project for obj in session.identity_map.values()):
                raise OSError(errno.ENOSPC, "No space left on device")

        event.listen(Session, "before_commit", full)
        try:
            response = upload(client, project, GOOD, "run.log")
        finally:
            event.remove(Session, "before_commit", full)

        assert response.status_code == 507, response.text
        assert response.json()["error"] == "InsufficientStorage"
        assert runs_of_project(db_engine, project) == []

    def test_part_files_of_a_killed_process_are_removed_at_start_up(self, app_settings: Settings) -> None:
        uploads = app_settings.data_dir / "uploads"
        uploads.mkdir(parents=True)
        (uploads / "0123abcd.part").write_bytes(b"half an upload")
        live = uploads / "live.part"
        with open(live, "xb") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # an upload another process is still receiving

            with TestClient(create_app(app_settings)):
                remaining = files_under(uploads)

        assert remaining == {"live.part"}

    def test_a_run_that_failed_for_lack_of_space_is_requeued_by_the_same_bytes(
        self, client: TestClient, db_engine: Engine, project: str
    ) -> None:
        first = upload(client, project, GOOD, "run.log").json()["id"]
        wait_for_run(client, first)
        failed_for_lack_of_space(db_engine, first, point_count=0, layer_count=0, series_count=0, rank_count=0)

        again = upload(client, project, GOOD, "run.log")

        assert (again.status_code, again.json()["id"], again.json()["status"]) == (202, first, "queued")
        run = wait_for_run(client, first)
        assert (run["status"], run["error"], run["points"]) == ("ready", None, 5)

    def test_enospc_during_ingest_fails_the_run_as_insufficient_storage_and_the_same_bytes_retry_it(
        self, client: TestClient, project: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        real = pipeline.scan_archive

        def disk_full(*args, **kwargs):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(pipeline, "scan_archive", disk_full)
        first = wait_for_run(client, upload(client, project, GOOD, "run.log").json()["id"])
        monkeypatch.setattr(pipeline, "scan_archive", real)

        assert (first["status"], first["error"]) == (
            "failed",
            "InsufficientStorage: [Errno 28] No space left on device",
        )
        again = upload(client, project, GOOD, "run.log")
        assert (again.status_code, again.json()["id"]) == (202, first["id"])
        assert wait_for_run(client, first["id"])["status"] == "ready"

    def test_a_run_refused_for_its_content_is_not_requeued(self, client: TestClient, project: str) -> None:
        data = latin1_tar([("a/" + stats_relpath(0), GOOD), ("a/" + stats_relpath(0), GOOD)])
        first = wait_for_run(client, upload(client, project, data).json()["id"])

        again = upload(client, project, data)

        assert (again.status_code, again.json()["status"], again.json()["error"]) == (200, "failed", first["error"])


class TestRetryEndpoint:
    def test_failed_run_with_its_upload_is_retried(self, client: TestClient, db_engine: Engine, project: str) -> None:
        run_id = upload(client, project, GOOD, "run.log").json()["id"]
        wait_for_run(client, run_id)
        failed_for_lack_of_space(db_engine, run_id)

        response = client.post(f"{RUNS}/{run_id}/retry")

        assert (response.status_code, response.json()["status"]) == (202, "queued")
        assert response.headers["Location"] == f"{RUNS}/{run_id}"
        run = wait_for_run(client, run_id)
        assert (run["status"], run["points"]) == ("ready", 5)
        assert row_counts(db_engine, run_id)["series"] == 1

    def test_ready_run_is_409(self, client: TestClient, project: str) -> None:
        run_id = wait_for_run(client, upload(client, project, GOOD, "run.log").json()["id"])["id"]

        response = client.post(f"{RUNS}/{run_id}/retry")

        assert response.status_code == 409
        assert response.json() == {
            "error": "NotRetryable",
            "detail": f"run {run_id} is ready; only a failed run can be retried",
        }

    def test_failed_run_without_its_upload_is_409_upload_missing(
        self, client: TestClient, db_engine: Engine, project: str
    ) -> None:
        run_id = insert_run(db_engine, project, status="failed", upload_path="runs/gone/upload.bin")

        response = client.post(f"{RUNS}/{run_id}/retry")

        assert response.status_code == 409
        assert response.json()["error"] == "UploadMissing"

    def test_unknown_run_is_404(self, client: TestClient) -> None:
        assert client.post(f"{RUNS}/2147483646/retry").status_code == 404
