"""Failure paths that must never fail, on SQLite and PostgreSQL (issue 9).

* Failing a run never fails: member names that are not UTF-8 end up in failure messages as displayable text.
* A run whose archive held a non-UTF-8 name (even a skipped one) reads back (the per-file report is displayable).
* Nothing is half-stored: a failure after the run row is inserted, or a failed commit, leaves no row and no
  file; a run left without its upload is repaired by uploading the same bytes again.

The server's own failures (a full disk, retries): test_server_side_failures.py.
"""

from __future__ import annotations

import hashlib
import tarfile
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event
from sqlalchemy.orm import Session, sessionmaker

from fp8_policy.db.job_models import NO_RANK, IngestJob
from fp8_policy.db.jobs import ClaimedJob
from fp8_policy.db.run_models import Run
from fp8_policy.db.runs import RunRepository
from fp8_policy.service.ingest import pipeline
from fp8_policy.service.ingest.pipeline import JobContext
from fp8_policy.service.runs import actions
from fp8_policy.service.settings import Settings
from fp8_policy.service.storage.archive import ArchiveStore
from tests.conftest import wait_for_run
from tests.service.ingest.failing_uploads import GOOD, RUNS, latin1_tar, upload
from tests.support.archives import stats_relpath
from tests.support.dbutil import files_under, insert_run, runs_of_project


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
