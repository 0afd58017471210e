"""Failure paths that must never fail, on SQLite and PostgreSQL (issue 9, items 2-5).

* Failing a run never fails: member names that are not UTF-8 end up in failure messages as displayable text.
* A run whose archive held a non-UTF-8 name (even a skipped one) reads back (the per-file report is displayable).
* Nothing is half-stored: a failure after the run row is inserted, or a failed commit, leaves no row and no
  file; a run left without its upload is repaired by uploading the same bytes again.
* A full disk is the server's fault (507, never 400), never leaves a `.part` behind; `.part` files of a killed
  process are removed at start-up; a run that failed for a server-side reason is retried by re-uploading its
  bytes or with `POST /api/v1/runs/{id}/retry`.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import io
import tarfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event, update
from sqlalchemy.orm import Session, sessionmaker

from fp8_policy.db.job_models import NO_RANK, IngestJob
from fp8_policy.db.jobs import ClaimedJob
from fp8_policy.db.run_models import Run
from fp8_policy.db.runs import RunRepository
from fp8_policy.service.app import create_app
from fp8_policy.service.ingest import pipeline
from fp8_policy.service.ingest import upload as upload_module
from fp8_policy.service.ingest.pipeline import JobContext
from fp8_policy.service.runs import actions
from fp8_policy.service.settings import Settings
from fp8_policy.service.storage.archive import ArchiveStore
from tests.conftest import wait_for_run
from tests.support.archives import stats_log, stats_relpath
from tests.support.dbutil import files_under, insert_run, row_counts, runs_of_project

RUNS = "/api/v1/runs"
UF = "model.layers.1.fc1_activation_underflows%"
GOOD = stats_log([(UF, it, it / 100) for it in range(0, 50, 10)])


def latin1_tar(members: list[tarfile.TarInfo | tuple[str, bytes]]) -> bytes:
    """A tar.gz whose member names are written in latin-1 (not UTF-8), as an old `tar` on a latin-1 system does."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.GNU_FORMAT, encoding="latin-1") as tar:
        for item in members:
            if isinstance(item, tarfile.TarInfo):
                tar.addfile(item)
                continue
            info = tarfile.TarInfo(item[0])
            info.size = len(item[1])
            tar.addfile(info, io.BytesIO(item[1]))
    return buffer.getvalue()


def upload(client: TestClient, project: str, data: bytes, filename: str = "logs.tar.gz") -> httpx.Response:
    return client.post(RUNS, files={"file": (filename, data, "application/octet-stream")}, data={"project": project})


def assert_readable(client: TestClient, project: str, run_id: int) -> dict:
    """The run, the project's list and the unfiltered list all answer 200 with strict, valid UTF-8 JSON."""
    single = client.get(f"{RUNS}/{run_id}")
    assert single.status_code == 200, single.text
    assert client.get(RUNS, params={"project": project}).status_code == 200
    assert client.get(RUNS).status_code == 200
    single.content.decode("utf-8")
    return single.json()


# --- item 2: failing a run never fails --------------------------------------------------------------------------


class TestFailingNeverFails:
    def test_duplicate_member_with_a_latin1_name_fails_the_run_with_a_displayable_error(
        self, client: TestClient, project: str
    ) -> None:
        name = "café/" + stats_relpath(0)
        response = upload(client, project, latin1_tar([(name, GOOD), (name, GOOD)]))

        run = wait_for_run(client, response.json()["id"])

        assert run["status"] == "failed"
        assert run["error"] == f"DuplicateMember: caf\\xe9/{stats_relpath(0)}: written twice"
        assert assert_readable(client, project, run["id"])["error"] == run["error"]

    def test_symlink_with_a_latin1_name_fails_the_run_with_a_displayable_error(
        self, client: TestClient, project: str
    ) -> None:
        link = tarfile.TarInfo("rank_0/lien-vers-café")
        link.type, link.linkname = tarfile.SYMTYPE, "élan"
        response = upload(client, project, latin1_tar([(stats_relpath(0), GOOD), link]))

        run = wait_for_run(client, response.json()["id"])

        assert (run["status"], run["error"]) == (
            "failed",
            "UnsupportedMember: rank_0/lien-vers-caf\\xe9: symlink to '\\xe9lan'",
        )
        assert_readable(client, project, run["id"])

    @pytest.mark.parametrize("error", ["caf\udce9 lone \ud800 surrogates", "NUL \x00 inside", "plain"])
    def test_mark_failed_stores_any_message(self, db_engine: Engine, project: str, error: str) -> None:
        run_id = insert_run(db_engine, project, status="processing")

        with Session(db_engine) as session, session.begin():
            RunRepository(session).mark_failed(run_id, f"InternalError: {error}")

        with Session(db_engine) as session:
            stored = session.get(Run, run_id)
            assert stored.status == "failed"
            stored.error.encode("utf-8")
            assert "\x00" not in stored.error and stored.error.startswith("InternalError: ")

    @pytest.mark.parametrize("error", ["ArchiveError: caf\udce9 \ud800", "IngestError: NUL \x00 in a name"])
    def test_failing_a_job_stores_any_message_on_the_run_and_the_job(
        self, app_settings: Settings, db_engine: Engine, project: str, error: str
    ) -> None:
        run_id = insert_run(db_engine, project, status="processing")
        with Session(db_engine) as session, session.begin():
            job = IngestJob(
                run_id=run_id,
                kind="plan",
                rank=NO_RANK,
                status="doing",
                attempts=1,
                owner="w1",
                lease_until=datetime.now(UTC) + timedelta(minutes=5),
                created_at=datetime.now(UTC),
            )
            session.add(job)
            session.flush()
            claimed = ClaimedJob(job.id, run_id, "plan", NO_RANK, 1)
        context = JobContext(sessionmaker(db_engine), app_settings, ArchiveStore(str(app_settings.data_dir)), "w1")

        pipeline._fail(context, claimed, error)

        with Session(db_engine) as session:
            run, stored_job = session.get(Run, run_id), session.get(IngestJob, claimed.id)
            assert (run.status, stored_job.status) == ("failed", "failed")
            for text in (run.error, stored_job.error):
                text.encode("utf-8")
                assert "\x00" not in text and text.startswith(error.split(":")[0])


# --- item 3: the per-file report is displayable ---------------------------------------------------------------


class TestNonUtf8NamesInTheReport:
    def test_skipped_latin1_file_name_does_not_break_the_run_page(self, client: TestClient, project: str) -> None:
        data = latin1_tar([(stats_relpath(0), GOOD), ("rank_0/notes-café.txt", b"hello\n")])
        response = upload(client, project, data)

        run = wait_for_run(client, response.json()["id"])
        shown = assert_readable(client, project, run["id"])

        assert shown["status"] == "ready"
        assert shown["ingest_report"]["archive"]["skipped_samples"] == ["rank_0/notes-caf\\xe9.txt"]

    def test_recognised_log_under_a_latin1_folder_is_ingested_and_reported(
        self, client: TestClient, project: str
    ) -> None:
        response = upload(client, project, latin1_tar([("exp-été/" + stats_relpath(0), GOOD)]))

        run = wait_for_run(client, response.json()["id"])
        shown = assert_readable(client, project, run["id"])

        assert (shown["status"], shown["points"]) == ("ready", 5)
        assert [f["path"] for f in shown["ingest_report"]["files"]] == ["exp-\\xe9t\\xe9/" + stats_relpath(0)]


# --- item 4: nothing half-stored --------------------------------------------------------------------------------


class TestNothingHalfStored:
    def test_failure_after_the_insert_leaves_no_row_and_no_file(
        self,
        client: TestClient,
        app_settings: Settings,
        db_engine: Engine,
        project: str,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        real = actions.run_read

        def broken(*args, **kwargs):
            raise RuntimeError("simulated failure after the run row was inserted")

        monkeypatch.setattr(actions, "run_read", broken)
        with pytest.raises(RuntimeError, match="simulated failure"):
            upload(client, project, GOOD, "run.log")
        monkeypatch.setattr(actions, "run_read", real)

        assert runs_of_project(db_engine, project) == []
        assert files_under(app_settings.data_dir / "runs") == set()
        assert files_under(app_settings.data_dir / "uploads") == set()
        again = upload(client, project, GOOD, "run.log")
        assert again.status_code == 202, again.text
        assert wait_for_run(client, again.json()["id"])["status"] == "ready"

    def test_failed_commit_leaves_no_row_and_no_orphaned_upload(
        self, client: TestClient, app_settings: Settings, db_engine: Engine, project: str
    ) -> None:
        def refuse(session: Session) -> None:
            if any(isinstance(obj, Run) and obj.project == project for obj in session.identity_map.values()):
                raise RuntimeError("simulated commit failure")

        event.listen(Session, "before_commit", refuse)
        try:
            with pytest.raises(RuntimeError, match="simulated commit failure"):
                upload(client, project, GOOD, "run.log")
        finally:
            event.remove(Session, "before_commit", refuse)

        assert runs_of_project(db_engine, project) == []
        assert files_under(app_settings.data_dir / "runs") == set()
        assert files_under(app_settings.data_dir / "uploads") == set()

    def test_run_left_without_its_upload_is_repaired_by_the_same_bytes(
        self, client: TestClient, app_settings: Settings, db_engine: Engine, project: str
    ) -> None:
        sha = hashlib.sha256(GOOD).hexdigest()
        broken = insert_run(db_engine, project, status="queued", upload_path="", sha256=sha)

        response = upload(client, project, GOOD, "run.log")

        assert (response.status_code, response.json()["id"]) == (202, broken)
        run = wait_for_run(client, broken)
        assert (run["status"], run["points"]) == ("ready", 5)
        assert files_under(app_settings.data_dir / "runs") == {f"{broken}/upload.bin"}


# --- item 5: a full disk -------------------------------------------------------------------------------------


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
