"""The ingest job queue on SQLite and PostgreSQL: one job per rank plus finalize, the same result as parsing
the whole tree at once, all-or-nothing failures with the rank, idempotent retries, leases (a second
process never takes a live process's jobs, issue 9 item 10; a dead local process's jobs are taken at once).
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select, update
from sqlalchemy.orm import Session

from fp8_policy.db.job_models import IngestJob
from fp8_policy.db.jobs import JobRepository
from fp8_policy.db.run_models import Layer, Run, Series
from fp8_policy.db.runs import utcnow
from fp8_policy.db.session import create_session_factory, session_scope
from fp8_policy.policy.parse.log_files import classify_log_path
from fp8_policy.service.ingest.parse import parse_files
from fp8_policy.service.ingest.pipeline import JobContext, run_job
from fp8_policy.service.settings import Settings
from fp8_policy.service.storage.archive import ArchiveStore
from tests.conftest import wait_for_run
from tests.support.archives import meta_relpath, multi_rank_tree, stats_relpath, tree_tar_gz, write_tree
from tests.support.dbutil import assembled_layer_fields, insert_run, layer_fields, row_counts

FAST = {"job_poll_seconds": 0.05, "job_lease_seconds": 2.0}


def jobs_of(engine: Engine, run_id: int) -> list[tuple[str, int, str]]:
    with Session(engine) as session:
        return [(j.kind, j.rank, j.status) for j in JobRepository(session).jobs_of(run_id)]


def upload(client: TestClient, data: bytes, project: str) -> int:
    response = client.post(
        "/api/v1/runs", params={"project": project}, content=data, headers={"Content-Type": "application/gzip"}
    )
    assert response.status_code == 202, response.text
    return response.json()["id"]


def ingested(client: TestClient, project: str, tmp_path: Path, ranks: int) -> dict:
    """A `ranks`-rank tree of 3 layers (5 points per series) uploaded and ingested: the run, checked ready with
    every layer, series and point."""
    tree = multi_rank_tree(tmp_path / "logs", ranks, layers=3)
    run = wait_for_run(client, upload(client, tree_tar_gz(tree), project))
    figures = (run["status"], run["ranks"], run["layer_count"], run["series_count"], run["points"])
    assert figures == ("ready", ranks, 3, 3 * ranks, 15 * ranks)
    return run


def plant(settings: Settings, engine: Engine, project: str, data: bytes, status: str = "queued") -> int:
    """A run whose archive is in the store, as an API process leaves it (no job queued)."""
    key = f"runs/planted-{project}/upload.bin"
    path = settings.data_dir / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return insert_run(engine, project, status=status, upload_path=key)


class TestPerRankJobs:
    def test_a_4_rank_archive_is_a_plan_4_rank_jobs_and_a_finalize(
        self, make_client, db_engine: Engine, project: str, tmp_path: Path
    ) -> None:
        run = ingested(make_client(**FAST), project, tmp_path, ranks=4)
        assert jobs_of(db_engine, run["id"]) == [
            ("plan", -1, "done"),
            *[("rank", r, "done") for r in range(4)],
            ("finalize", -1, "done"),
        ]

    def test_a_1_rank_archive_is_finalized_by_its_plan_job(
        self, make_client, db_engine: Engine, project: str, tmp_path: Path, monkeypatch
    ) -> None:
        from fp8_policy.service.ingest import pipeline

        claimed: list[tuple[int, str]] = []  # (run, kind): the database is shared, other tests' jobs may be queued
        for kind, handler in list(pipeline._HANDLERS.items()):
            monkeypatch.setitem(
                pipeline._HANDLERS,
                kind,
                lambda ctx, job, h=handler: (claimed.append((job.run_id, job.kind)), h(ctx, job)),
            )
        run = ingested(make_client(**FAST), project, tmp_path, ranks=1)
        assert jobs_of(db_engine, run["id"]) == [("plan", -1, "done"), ("rank", 0, "done"), ("finalize", -1, "done")]
        # the rank and finalize jobs were recorded done by the plan job's transaction
        assert [kind for run_id, kind in claimed if run_id == run["id"]] == ["plan"]

    def test_a_1_rank_archive_without_attributable_lines_fails_in_its_plan_job_and_keeps_nothing(
        self, make_client, db_engine: Engine, project: str, tmp_path: Path
    ) -> None:
        from tests.support.archives import stats_log

        tree = write_tree(tmp_path / "logs", {stats_relpath(0): stats_log([("nolayer", 0, 1.0), ("nolayer", 10, 2.0)])})
        client = make_client(**FAST)
        run = wait_for_run(client, upload(client, tree_tar_gz(tree), project))

        assert run["status"] == "failed"
        assert run["error"].startswith("NoStatsLines: no statistics line could be attributed"), run["error"]
        assert row_counts(db_engine, run["id"]) == {"runs": 1, "run_tags": 0, "layers": 0, "series": 0}

    def test_the_stored_run_equals_parsing_the_whole_tree_at_once(
        self, make_client, db_engine: Engine, project: str, tmp_path: Path
    ) -> None:
        tree = multi_rank_tree(tmp_path / "logs", 3, layers=4)
        client = make_client(**FAST)
        run = wait_for_run(client, upload(client, tree_tar_gz(tree), project))
        files = [(classify_log_path(p.relative_to(tree).as_posix()), p) for p in sorted(tree.rglob("*.log"))]
        assembled, counts = parse_files(files, max_line_bytes=1 << 20, threads=1)

        with Session(db_engine) as session:
            layers = [
                layer_fields(la)
                for la in session.scalars(select(Layer).where(Layer.run_id == run["id"]).order_by(Layer.position))
            ]
            series = {
                (s.rank, s.stat_key, s.count, s.min, s.max, s.last)
                for s in session.scalars(select(Series).where(Series.run_id == run["id"]))
            }
        assert layers == [assembled_layer_fields(la) for la in assembled.layers]
        assert series == {
            (s.rank, s.metric.stat_key, s.summary.count, s.summary.min, s.summary.max, s.summary.last)
            for s in assembled.series
        }
        assert (run["points"], run["lines_read"], run["lines_duplicated"]) == (
            assembled.points,
            counts.lines_read,
            counts.lines_duplicated,
        )

    def test_a_failing_rank_fails_the_run_with_its_rank_and_nothing_is_kept(
        self, make_client, db_engine: Engine, project: str, tmp_path: Path
    ) -> None:
        tree = multi_rank_tree(tmp_path / "logs", 3)
        (tree / stats_relpath(1)).write_bytes(b"2026-01-01 00:00:00,000 - INFO - not a statistics line\n")
        client = make_client(**FAST)
        run = wait_for_run(client, upload(client, tree_tar_gz(tree), project))

        assert run["status"] == "failed"
        assert run["error"].startswith("rank 1: NoStatsLines: rank_1/nvdlfw_inspect_statistics_logs/"), run["error"]
        assert row_counts(db_engine, run["id"]) == {"runs": 1, "run_tags": 0, "layers": 0, "series": 0}
        assert {status for _k, _r, status in jobs_of(db_engine, run["id"])} <= {"done", "failed"}

    def test_sessions_stored_out_of_order_in_the_archive_are_parsed_oldest_first(
        self, make_client, project: str, tmp_path: Path
    ) -> None:
        import tarfile

        from tests.support.archives import stats_log

        old = stats_log([("model.layers.1.fc1_activation_underflows%", 0, 1.0)])
        new = stats_log([("model.layers.1.fc1_activation_underflows%", 0, 2.0)])
        members = {stats_relpath(0): new, stats_relpath(0, stamp="20260101_000000"): old, meta_relpath(0): b""}
        tree = write_tree(tmp_path / "logs", members)
        archive = tmp_path / "x.tgz"
        with tarfile.open(archive, "w:gz") as tar:  # the plain (newest) file first
            for relpath in members:
                tar.add(tree / relpath, arcname=relpath)
        client = make_client(**FAST)
        run = wait_for_run(client, upload(client, archive.read_bytes(), project))
        series = client.get(
            f"/api/v1/runs/{run['id']}/series",
            params={"layer": "model.layers.1.fc1", "tensor": "activation", "stat": "underflows%"},
        ).json()

        # both sessions start at iteration 0: the newer one restarted its counter and is placed after the older
        assert (run["status"], run["lines_duplicated"]) == ("ready", 0)
        assert (series["series"][0]["iterations"], series["series"][0]["values"]) == ([0, 1], [1.0, 2.0])


class TestPlanStoresTheFirstRank:
    def test_a_single_rank_upload_is_decompressed_once_by_the_plan_job(
        self, make_client, db_engine: Engine, project: str, tmp_path: Path
    ) -> None:
        client = make_client(**FAST)
        run = wait_for_run(client, upload(client, tree_tar_gz(multi_rank_tree(tmp_path / "logs", 1)), project))

        assert (run["status"], run["points"], run["lines_read"]) == ("ready", 10, 10)
        with Session(db_engine) as session:
            jobs = {(j.kind, j.rank): (j.status, j.attempts) for j in JobRepository(session).jobs_of(run["id"])}
        assert jobs == {("plan", -1): ("done", 1), ("rank", 0): ("done", 1), ("finalize", -1): ("done", 1)}
        assert [f["path"] for f in run["ingest_report"]["files"] if f["kind"] == "stats"] == [
            "rank_0/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log"
        ]

    def test_a_first_rank_with_two_sessions_is_left_to_its_rank_job(
        self, make_client, project: str, tmp_path: Path
    ) -> None:
        from tests.support.archives import stats_log

        old = stats_log([("model.layers.1.fc1_activation_underflows%", 0, 1.0)])
        new = stats_log([("model.layers.1.fc1_activation_underflows%", 0, 2.0)])
        tree = write_tree(tmp_path / "logs", {stats_relpath(0, stamp="20260101_000000"): old, stats_relpath(0): new})
        client = make_client(**FAST)
        run = wait_for_run(client, upload(client, tree_tar_gz(tree), project))
        series = client.get(
            f"/api/v1/runs/{run['id']}/series",
            params={"layer": "model.layers.1.fc1", "tensor": "activation", "stat": "underflows%"},
        ).json()

        assert (run["status"], run["lines_duplicated"], series["series"][0]["values"]) == ("ready", 0, [1.0, 2.0])


class TestRetriesAndLeases:
    def _context(self, settings: Settings, engine: Engine, owner: str) -> JobContext:
        """A worker whose plan job parses only the first rank while it scans (a budget of 1 byte of kept arrays):
        the other ranks get rank jobs of their own."""
        settings = settings.model_copy(update={"scan_parse_bytes": 1})
        return JobContext(create_session_factory(engine), settings, ArchiveStore(str(settings.data_dir)), owner)

    def _claim(self, ctx: JobContext, kind: str):
        with session_scope(ctx.factory) as session:
            job = JobRepository(session).claim(ctx.owner, 60)
        assert job is not None and job.kind == kind, job
        return job

    def test_a_rank_job_run_twice_stores_its_series_once(
        self, app_settings: Settings, db_engine: Engine, project: str, tmp_path: Path
    ) -> None:
        run_id = plant(app_settings, db_engine, project, tree_tar_gz(multi_rank_tree(tmp_path / "t", 2, layers=2)))
        first = self._context(app_settings, db_engine, f"first-{project}")
        second = self._context(app_settings, db_engine, f"second-{project}")
        with session_scope(first.factory) as session:
            JobRepository(session).enqueue_plan(run_id)
        run_job(first, self._claim(first, "plan"))
        rank_job = self._claim(first, "rank")
        run_job(first, rank_job)
        with Session(db_engine) as session, session.begin():  # as if the job's completion were lost
            session.execute(
                update(IngestJob)
                .where(IngestJob.id == rank_job.id)
                .values(status="doing", owner=first.owner, lease_until=utcnow() - timedelta(seconds=1))
            )
        again = self._claim(second, "rank")
        run_job(second, again)
        run_job(second, self._claim(second, "finalize"))

        assert (again.id, again.rank, again.attempts) == (rank_job.id, 1, 2)  # rank 0 was stored by the plan job
        assert row_counts(db_engine, run_id) == {"runs": 1, "run_tags": 0, "layers": 2, "series": 4}
        with Session(db_engine) as session:
            points = session.scalar(select(func.sum(Series.count)).where(Series.run_id == run_id))
        assert points == 20

    def test_a_worker_whose_lease_was_taken_over_stores_nothing(
        self, app_settings: Settings, db_engine: Engine, project: str, tmp_path: Path
    ) -> None:
        run_id = plant(app_settings, db_engine, project, tree_tar_gz(multi_rank_tree(tmp_path / "t", 2)))
        slow = self._context(app_settings, db_engine, f"slow-{project}")
        with session_scope(slow.factory) as session:
            JobRepository(session).enqueue_plan(run_id)
        run_job(slow, self._claim(slow, "plan"))
        held = self._claim(slow, "rank")
        with Session(db_engine) as session, session.begin():  # its heartbeat stopped; another worker took it
            session.execute(update(IngestJob).where(IngestJob.id == held.id).values(owner="someone-else"))

        run_job(slow, held)

        assert row_counts(db_engine, run_id)["series"] == 2  # rank 0's, stored by the plan job; none of rank 1
        assert jobs_of(db_engine, run_id) == [
            ("plan", -1, "done"),
            ("rank", 0, "done"),
            ("rank", 1, "doing"),
            ("finalize", -1, "queued"),
        ]

    def test_a_job_started_too_often_fails_the_run(
        self, app_settings: Settings, db_engine: Engine, project: str, tmp_path: Path
    ) -> None:
        run_id = plant(app_settings, db_engine, project, tree_tar_gz(multi_rank_tree(tmp_path / "t", 1)))
        ctx = self._context(app_settings.model_copy(update={"job_max_attempts": 1}), db_engine, f"w-{project}")
        with session_scope(ctx.factory) as session:
            JobRepository(session).enqueue_plan(run_id)
        with Session(db_engine) as session, session.begin():  # two workers died holding it
            session.execute(update(IngestJob).where(IngestJob.run_id == run_id).values(attempts=1))
        run_job(ctx, self._claim(ctx, "plan"))

        with Session(db_engine) as session:
            from fp8_policy.db.run_models import Run

            run = session.get(Run, run_id)
            assert (run.status, run.error) == ("failed", "WorkerLost: the worker running this job stopped 1 times")


class TestSecondProcessOnTheSameDatabase:
    """Issue 9 item 10: start-up recovery only takes jobs whose owner is gone."""

    def _hold(self, engine: Engine, run_id: int, owner: str, seconds: float) -> None:
        with Session(engine) as session, session.begin():
            JobRepository(session).enqueue_plan(run_id)
            session.execute(
                update(IngestJob)
                .where(IngestJob.run_id == run_id)
                .values(status="doing", owner=owner, attempts=1, lease_until=utcnow() + timedelta(seconds=seconds))
            )

    def test_a_live_owners_job_is_left_alone_until_its_lease_runs_out(
        self, make_client, app_settings: Settings, db_engine: Engine, project: str, tmp_path: Path
    ) -> None:
        run_id = plant(
            app_settings, db_engine, project, tree_tar_gz(multi_rank_tree(tmp_path / "t", 2)), status="processing"
        )
        self._hold(db_engine, run_id, "another-host:4242:live", seconds=3600)
        client = make_client(**FAST)
        time.sleep(1.0)  # the new process polled ~20 times meanwhile

        assert client.get(f"/api/v1/runs/{run_id}").json()["status"] == "processing"
        assert jobs_of(db_engine, run_id) == [("plan", -1, "doing")]

        with Session(db_engine) as session, session.begin():  # the other process stops sending heartbeats
            session.execute(
                update(IngestJob).where(IngestJob.run_id == run_id).values(lease_until=utcnow() - timedelta(seconds=1))
            )
        run = wait_for_run(client, run_id)
        assert (run["status"], run["ranks"], run["points"]) == ("ready", 2, 20)

    def test_jobs_of_a_dead_process_on_this_host_are_taken_at_start_up(
        self, make_client, app_settings: Settings, db_engine: Engine, project: str, tmp_path: Path
    ) -> None:
        run_id = plant(
            app_settings, db_engine, project, tree_tar_gz(multi_rank_tree(tmp_path / "t", 1)), status="processing"
        )
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        self._hold(db_engine, run_id, f"{socket.gethostname()}:{dead.pid}:gone", seconds=3600)
        client = make_client(**FAST)

        run = wait_for_run(client, run_id, timeout=10)
        assert run["status"] == "ready"
        with Session(db_engine) as session:
            attempts = [j.attempts for j in JobRepository(session).jobs_of(run_id) if j.kind == "plan"]
        assert attempts == [2]  # the dead process's attempt, then this one's


def test_readers_holding_every_request_connection_do_not_starve_the_ingest(make_client, project: str) -> None:
    """Background work (ingest, summaries, alerts) has its own pool: under the mixed load of bench/load.py the
    readers held all 30 request connections and a plan job waited 30 s for one, then failed its run."""
    client = make_client(ingest_in_process=False, db_pool_size=1, db_max_overflow=0, db_pool_timeout=0.5, **FAST)
    state = client.app.state
    archive = tree_tar_gz(multi_rank_tree(Path(client.app.state.settings.data_dir) / "tree", ranks=2))
    response = client.post(
        "/api/v1/runs", files={"file": ("run.tar.gz", archive, "application/gzip")}, data={"project": project}
    )
    assert response.status_code == 202, response.text
    run_id = response.json()["id"]
    with state.engine.connect():  # the only request connection, held: a request would now get a 503
        assert client.get(f"/api/v1/runs/{run_id}").status_code == 503
        state.ingest.start()  # the jobs queued by the upload run on the background pool
        deadline = time.monotonic() + 60
        while True:
            with session_scope(state.ingest.factory) as session:
                status = session.scalar(select(Run.status).where(Run.id == run_id))
            if status in ("ready", "failed") or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert status == "ready"
    assert wait_for_run(client, run_id)["status"] == "ready"


class TestSummaryAfterReady:
    def test_a_slow_summary_after_ready_is_no_lost_lease(
        self,
        make_client,
        project: str,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        # the summary runs in the job's thread after the job is recorded done: the heartbeat (every lease / 3 =
        # 0.67 s here) must not renew that finished job and report its lease as lost meanwhile
        from fp8_policy.service import after_ingest

        started = threading.Event()

        def slow_summary(factory, run_id):
            started.set()
            time.sleep(2.0)  # three heartbeats

        monkeypatch.setattr(after_ingest, "store_summary", slow_summary)
        client = make_client(**FAST)
        tree = multi_rank_tree(tmp_path / "logs", 1, layers=2)
        with caplog.at_level(logging.WARNING, logger="fp8_policy.ingest"):
            run = wait_for_run(client, upload(client, tree_tar_gz(tree), project))
            assert run["status"] == "ready" and started.wait(30)
            time.sleep(2.2)

        assert "were lost" not in caplog.text
