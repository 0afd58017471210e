"""API tests for reading, listing and deleting runs (GET /api/v1/runs/{id}, GET /api/v1/runs, DELETE
/api/v1/runs/{id}) and /healthz: one class per endpoint, one scenario per test, on SQLite and PostgreSQL.

The database is shared by every test of a backend, so each test works in its own `project` and only looks at
its own runs (uploads: tests/service/runs/run_uploads.py).
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from tests.conftest import RUN_FIGURES, upload, wait_for_run
from tests.service.runs.run_uploads import (
    RUNS,
    clean_stats_file,
    ingest,
    list_ids,
    ready_esm2,
    ready_log,
    tiny_log,
)
from tests.support.archives import (
    TS,
    tar_bytes,
)
from tests.support.dbutil import files_under, row_counts


class TestReadRun:
    def test_esm2_run_shows_ingest_figures_and_the_per_file_report(self, client: TestClient, project: str) -> None:
        run_id = ready_esm2(client, project)["id"]

        response = client.get(f"{RUNS}/{run_id}")

        assert response.status_code == 200
        run = response.json()
        assert {k: run[k] for k in ("status", *RUN_FIGURES)} == {
            "status": "ready",
            "ranks": 1,
            "layer_count": 26,
            "series_count": 72,
            "points": 1800,
            "iteration_min": 0,
            "iteration_max": 240,
            "lines_read": 1800,
            "lines_skipped": 0,
            "lines_blank": 0,
            "lines_duplicated": 0,
        }
        assert run["ingest_report"] == {
            "files": [
                {
                    "path": "rank_0/nvdlfw_inspect_logs/nvdlfw_inspect_globalrank-0.log",
                    "rank": 0,
                    "kind": "metadata",
                    "lines_read": 253,
                    "lines_unrecognised": 0,
                },
                clean_stats_file("rank_0/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log", 1800),
            ],
            "unsplit_metric_names": [],
            "unsplit_points": 0,
            "archive": {"format": "tar.gz", "skipped_members": 0, "skipped_samples": []},
            "scalars": None,  # the archive carries no scalars.jsonl (service/ingest/scalars.py)
        }

    def test_unknown_run_is_404(self, client: TestClient) -> None:
        response = client.get(f"{RUNS}/987654321")

        assert response.status_code == 404
        assert response.json() == {"error": "NotFound", "detail": "run 987654321 does not exist"}

    @pytest.mark.parametrize("run_id", [2**63, -(2**63) - 1, -628928413900093652992])
    @pytest.mark.parametrize(
        ("method", "path"),
        [("GET", "{runs}/{id}"), ("DELETE", "{runs}/{id}"), ("POST", "/api/v1/live/runs/{id}/finalize")],
    )
    def test_a_run_id_beyond_64_bits_is_404(self, client: TestClient, method: str, path: str, run_id: int) -> None:
        # sqlite3 raised OverflowError for such a parameter: 500 (the schema fuzz found it on finalize)
        response = client.request(method, path.format(runs=RUNS, id=run_id))

        assert response.status_code == 404
        assert response.json()["error"] == "NotFound"


class TestListRuns:
    def test_project_filter_lists_only_that_project_newest_first(self, client: TestClient, project: str) -> None:
        mine = [upload(client, tiny_log(k), project=project, content_type="text/plain").json()["id"] for k in (1, 2)]
        upload(client, tiny_log(3), project=f"{project}-other", content_type="text/plain")

        assert list_ids(client, project=project) == sorted(mine, reverse=True)

    def test_status_filter(self, client: TestClient, project: str) -> None:
        ready = ready_log(client, project, tiny_log(1))["id"]
        log_of_unusable_lines = f"{TS} - INFO - not a statistics line\n".encode()  # held a log: listed when failed
        failed = ingest(
            client, upload(client, log_of_unusable_lines, project=project, content_type="text/plain"), status="failed"
        )["id"]

        assert list_ids(client, project=project, status="ready") == [ready]
        assert list_ids(client, project=project, status="failed") == [failed]
        assert list_ids(client, project=project, status="queued") == []

    def test_a_failed_upload_that_never_held_a_log_is_not_listed(self, client: TestClient, project: str) -> None:
        """Not an archive nor a log, or an archive without a statistics file: readable by id, not a run in the list."""
        ready = ready_log(client, project, tiny_log(1))["id"]
        not_a_log = ingest(
            client, upload(client, b"meeting notes\n", project=project, content_type="text/plain"), "failed"
        )
        no_stats = ingest(
            client, upload(client, tar_bytes({"README.md": b"hi"}), project=project, filename="x.tar"), "failed"
        )

        assert (not_a_log["error"].split(":")[0], no_stats["error"].split(":")[0]) == ("NotAnArchive", "NoStatsFile")
        assert list_ids(client, project=project) == [ready]
        assert list_ids(client, project=project, status="failed") == []
        assert client.get(f"{RUNS}/{not_a_log['id']}").json()["status"] == "failed"

    def test_tag_filter(self, client: TestClient, project: str) -> None:
        tagged = upload(client, tiny_log(1), project=project, content_type="text/plain", tags="bf16,ablation").json()
        upload(client, tiny_log(2), project=project, content_type="text/plain", tags="bf16")

        assert list_ids(client, project=project, tag="ablation") == [tagged["id"]]
        assert len(list_ids(client, project=project, tag="bf16")) == 2

    def test_cursor_pagination_with_limit_1_walks_every_page_once(self, client: TestClient, project: str) -> None:
        created = [
            upload(client, tiny_log(k), project=project, content_type="text/plain").json()["id"] for k in range(4)
        ]
        seen: list[int] = []
        cursor = None

        for _ in range(10):
            params = {"project": project, "limit": 1, **({"cursor": cursor} if cursor else {})}
            page = client.get(RUNS, params=params).json()
            seen += [run["id"] for run in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break

        assert seen == sorted(created, reverse=True)
        assert cursor is None

    def test_invalid_cursor_is_400(self, client: TestClient, project: str) -> None:
        response = client.get(RUNS, params={"project": project, "cursor": "abc"})

        assert response.status_code == 400
        assert response.json() == {"error": "BadRequest", "detail": "invalid cursor 'abc'"}


class TestDeleteRun:
    def test_delete_removes_the_run_its_rows_and_its_files(
        self, client: TestClient, project: str, db_engine: Engine, app_settings
    ) -> None:
        run_id = ready_esm2(client, project)["id"]
        run_dir = app_settings.data_dir / "runs" / str(run_id)
        assert files_under(run_dir) == {"upload.bin"}
        assert row_counts(db_engine, run_id) == {"runs": 1, "run_tags": 0, "layers": 26, "series": 72}

        response = client.delete(f"{RUNS}/{run_id}")

        assert (response.status_code, response.content) == (204, b"")
        assert client.get(f"{RUNS}/{run_id}").json() == {"error": "NotFound", "detail": f"run {run_id} does not exist"}
        assert not run_dir.exists()
        assert row_counts(db_engine, run_id) == {"runs": 0, "run_tags": 0, "layers": 0, "series": 0}

    def test_delete_removes_tags(self, client: TestClient, project: str, db_engine: Engine) -> None:
        run_id = upload(client, tiny_log(1), project=project, content_type="text/plain", tags="a,b").json()["id"]
        wait_for_run(client, run_id)

        assert client.delete(f"{RUNS}/{run_id}").status_code == 204

        assert row_counts(db_engine, run_id) == {"runs": 0, "run_tags": 0, "layers": 0, "series": 0}
        assert list_ids(client, project=project, tag="a") == []

    def test_unknown_run_is_404(self, client: TestClient) -> None:
        response = client.delete(f"{RUNS}/987654321")

        assert response.status_code == 404
        assert response.json() == {"error": "NotFound", "detail": "run 987654321 does not exist"}


class TestHealthz:
    def test_ok_with_a_database_round_trip(self, client: TestClient) -> None:
        response = client.get("/healthz")

        assert response.status_code == 200
        assert response.json() == {"status": "ok", "database": "ok"}
