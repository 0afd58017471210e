"""Issue 10 "Done when": a throwaway PostgreSQL cluster, a moto S3 server, 2 API processes (`serve --no-ingest`)
and 2 workers; a 4-rank run is uploaded, the worker holding one of its rank jobs is killed with SIGKILL in the
middle of it, and the run still ends `ready` with exact counts (the job retried by the other worker after its
lease ran out, nothing stored twice) and its archive in the bucket. Bounded: every wait has a deadline.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import Session

from fp8_policy.db.job_models import IngestJob
from fp8_policy.db.migrate import upgrade
from fp8_policy.db.run_models import Series
from tests.support.archives import multi_rank_tree, tree_tar_gz
from tests.support.cluster import Cluster
from tests.support.s3 import S3Bucket

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

RANKS, LAYERS, ITERATIONS = 4, 40, range(0, 10_000, 2)  # 200,000 lines per rank
LEASE_SECONDS = 3.0


def _holder_of_a_rank_job(engine, run_id: int, deadline: float) -> tuple[int, str]:
    """(job id, owner) of the first rank job of the run seen `doing`."""
    with Session(engine) as session:
        while time.monotonic() < deadline:
            row = session.execute(
                select(IngestJob.id, IngestJob.owner).where(
                    IngestJob.run_id == run_id, IngestJob.kind == "rank", IngestJob.status == "doing"
                )
            ).first()
            session.rollback()
            if row is not None:
                return row[0], row[1]
            time.sleep(0.005)
    raise AssertionError("no rank job was seen in progress")


def test_two_apis_two_workers_s3_and_a_worker_killed_mid_job(
    postgres_server, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    database_url = postgres_server.create_database()
    upgrade(database_url)
    engine = create_engine(database_url)
    data = tree_tar_gz(multi_rank_tree(tmp_path / "logs", RANKS, layers=LAYERS, iterations=ITERATIONS))
    env = {
        **s3_bucket.env(),
        "FP8_POLICY_DATABASE_URL": database_url,
        "FP8_POLICY_JOB_LEASE_SECONDS": str(LEASE_SECONDS),
        "FP8_POLICY_SCAN_PARSE_BYTES": "0",  # every rank its own job (the plan job would parse these 4 itself)
        "FP8_POLICY_JOB_POLL_SECONDS": "0.1",
    }
    with Cluster(tmp_path / "cluster", env) as cluster:
        first, second = cluster.start_api(), cluster.start_api()
        workers = [cluster.start_worker(), cluster.start_worker()]
        cluster.wait_healthy()
        time.sleep(1.0)  # the workers load the parser kernels

        response = httpx.post(
            f"{first.url}/api/v1/runs",
            params={"project": "scale-out", "name": "4 ranks"},
            content=data,
            headers={"Content-Type": "application/gzip"},
            timeout=60,
        )
        assert response.status_code == 202, response.text
        run_id = response.json()["id"]
        job_id, owner = _holder_of_a_rank_job(engine, run_id, time.monotonic() + 60)
        pid = int(owner.split(":")[1])
        victim = next(w for w in workers if w.process.pid == pid)
        os.kill(pid, signal.SIGKILL)
        victim.process.wait(timeout=10)
        with Session(engine) as session:  # killed mid-job: the job was still held, not done
            killed = session.get(IngestJob, job_id)
            assert (killed.status, killed.owner) == ("doing", owner), (killed.status, killed.owner)

        deadline = time.monotonic() + 60
        while True:
            run = httpx.get(f"{second.url}/api/v1/runs/{run_id}", timeout=10).json()
            if run["status"] in ("ready", "failed") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        logs = "\n".join(f"--- {m.name}\n{m.log_tail()}" for m in cluster.apis + cluster.workers)

    assert run["status"] == "ready", f"{run}\n{logs}"
    points = RANKS * LAYERS * len(ITERATIONS)
    assert (
        run["ranks"],
        run["layer_count"],
        run["series_count"],
        run["points"],
        run["lines_read"],
        run["lines_duplicated"],
    ) == (RANKS, LAYERS, RANKS * LAYERS, points, points, 0)
    with Session(engine) as session:
        retried = session.get(IngestJob, job_id)
        stored = session.execute(select(func.count(), func.sum(Series.count)).where(Series.run_id == run_id)).one()
    assert (retried.status, retried.attempts) == ("done", 2)
    assert retried.owner is None and stored == (RANKS * LAYERS, points)
    assert s3_bucket.filesystem().cat_file(f"{s3_bucket.name}/fp8-archives/runs/{run_id}/upload.bin") == data
    engine.dispose()
