"""Start-up recovery, on SQLite and PostgreSQL: runs a stopped service left `processing` (or `queued`) are
queued again and ingested when a new app starts (TestClient runs the lifespan); a run whose upload file is
gone fails with UploadMissing; finished runs are left alone.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from fp8_policy.service.app import create_app
from fp8_policy.service.settings import Settings
from tests.conftest import wait_for_run
from tests.support.archives import esm2_tar_gz, stats_log
from tests.support.dbutil import files_under, insert_run, row_counts


def plant_upload(settings: Settings, name: str, data: bytes) -> str:
    """An upload file under data_dir as store_upload leaves it; returns its path relative to data_dir."""
    relative = f"runs/{name}/upload.bin"
    path = settings.data_dir / relative
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    return relative


class TestResumeAtStartup:
    def test_run_left_processing_is_requeued_and_becomes_ready(
        self, app_settings: Settings, db_engine: Engine, project: str
    ) -> None:
        upload_path = plant_upload(app_settings, "interrupted", esm2_tar_gz())
        run_id = insert_run(db_engine, project, status="processing", upload_path=upload_path)

        with TestClient(create_app(app_settings)) as client:
            run = wait_for_run(client, run_id)

        assert (run["status"], run["error"], run["layer_count"], run["points"]) == ("ready", None, 26, 1800)
        assert row_counts(db_engine, run_id) == {"runs": 1, "run_tags": 0, "layers": 26, "series": 72}
        assert files_under(app_settings.data_dir / "work") == set()

    def test_run_left_queued_is_submitted(self, app_settings: Settings, db_engine: Engine, project: str) -> None:
        upload_path = plant_upload(
            app_settings, "queued", stats_log([("model.layers.1.fc1_activation_underflows%", 0, 1.0)])
        )
        run_id = insert_run(db_engine, project, status="queued", upload_path=upload_path)

        with TestClient(create_app(app_settings)) as client:
            run = wait_for_run(client, run_id)

        assert (run["status"], run["points"], run["layer_count"]) == ("ready", 1, 1)

    @pytest.mark.parametrize("upload_path", ["runs/gone/upload.bin", ""], ids=["file-gone", "no-path-recorded"])
    def test_run_whose_upload_is_missing_fails_with_upload_missing(
        self, app_settings: Settings, db_engine: Engine, project: str, upload_path: str
    ) -> None:
        run_id = insert_run(db_engine, project, status="processing", upload_path=upload_path)

        with TestClient(create_app(app_settings)) as client:
            run = wait_for_run(client, run_id)
            layers = client.get(f"/api/v1/runs/{run_id}/layers")

        assert (run["status"], run["error"]) == (
            "failed",
            f"UploadMissing: the uploaded file of run {run_id} is no longer on disk",
        )
        assert layers.status_code == 409
        assert layers.json() == {"error": "NotReady", "detail": f"run {run_id} is failed: {run['error']}"}
        assert row_counts(db_engine, run_id) == {"runs": 1, "run_tags": 0, "layers": 0, "series": 0}
        assert files_under(app_settings.data_dir / "work") == set()

    def test_finished_runs_are_left_alone(self, app_settings: Settings, db_engine: Engine, project: str) -> None:
        failed = insert_run(db_engine, project, status="failed", upload_path="runs/none/upload.bin")
        ready = insert_run(db_engine, f"{project}-ready", status="ready", upload_path="runs/none/upload.bin")

        with TestClient(create_app(app_settings)) as client:
            client.app.state.ingest.wait_idle(timeout=30)
            statuses = [client.get(f"/api/v1/runs/{run_id}").json()["status"] for run_id in (failed, ready)]

        assert statuses == ["failed", "ready"]

    def test_restart_after_a_finished_ingest_does_not_ingest_again(self, app_settings: Settings, project: str) -> None:
        with TestClient(create_app(app_settings)) as client:
            response = client.post(
                "/api/v1/runs",
                params={"project": project},
                content=esm2_tar_gz(),
                headers={"Content-Type": "application/gzip"},
            )
            first = wait_for_run(client, response.json()["id"])

        with TestClient(create_app(app_settings)) as client:
            client.app.state.ingest.wait_idle(timeout=30)
            again = client.get(f"/api/v1/runs/{first['id']}").json()

        assert (again["status"], again["started_at"], again["finished_at"]) == (
            "ready",
            first["started_at"],
            first["finished_at"],
        )
