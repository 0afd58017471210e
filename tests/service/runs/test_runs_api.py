"""API tests for creating runs (POST /api/v1/runs): one scenario per test, on SQLite and PostgreSQL. Reading, listing
and deleting runs: test_run_reads.py; a run's layers, series and CSV: test_run_series.py.

The database is shared by every test of a backend, so each test works in its own `project` and only looks at
its own runs. Uploads are the real bionemo ESM2 / Llama3 trees (read from ../shared, never copied) or small
synthetic nvdlfw_inspect logs written under tmp_path (tests/service/runs/run_uploads.py).
"""

from __future__ import annotations

import hashlib
import io
import json
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from tests.conftest import upload, wait_for_run
from tests.service.runs.run_uploads import (
    ESM2_LAYER,
    FC1,
    LLAMA3_QKV1,
    RUNS,
    UF,
    clean_stats_file,
    ingest,
    list_ids,
    ready_log,
    series_of,
    summary,
    tiny_log,
    upload_raw,
)
from tests.support.archives import (
    ESM2_STATS,
    LLAMA3_STATS,
    esm2_tar_gz,
    gz_bytes,
    llama3_tar_gz,
    llama3_zip,
    meta_relpath,
    metadata_log,
    multi_rank_tree,
    rank_value,
    stats_log,
    stats_relpath,
    tar_bytes,
    tree_tar_gz,
    write_tree,
)
from tests.support.dbutil import files_under

# --- helpers ---------------------------------------------------------------------------------------------


# --- POST /api/v1/runs ------------------------------------------------------------------------------------


class TestCreateRun:
    def test_esm2_tar_gz_multipart_is_queued_then_ready(self, client: TestClient, project: str) -> None:
        data = esm2_tar_gz()
        metadata = {"model": "esm2", "gpu": "H100", "hidden": 320}

        response = upload(
            client,
            data,
            project=project,
            filename="esm2.tar.gz",
            name="esm2 dummy",
            tags="fp8, esm2,fp8",
            metadata=json.dumps(metadata),
        )

        assert response.status_code == 202
        body = response.json()
        assert response.headers["location"] == f"{RUNS}/{body['id']}"
        assert {
            k: body[k]
            for k in (
                "name",
                "project",
                "tags",
                "status",
                "error",
                "metadata",
                "upload_filename",
                "upload_bytes",
                "sha256",
                "points",
                "ingest_report",
            )
        } == {
            "name": "esm2 dummy",
            "project": project,
            "tags": ["fp8", "esm2"],
            "status": "queued",
            "error": None,
            "metadata": metadata,
            "upload_filename": "esm2.tar.gz",
            "upload_bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "points": 0,
            "ingest_report": None,
        }
        run = wait_for_run(client, body["id"])
        assert (run["status"], run["error"], run["points"]) == ("ready", None, 1800)
        assert sorted(run["tags"]) == ["esm2", "fp8"]
        times = [datetime.fromisoformat(run[key]) for key in ("created_at", "started_at", "finished_at")]
        assert times == sorted(times)

    def test_llama3_zip_multipart_is_ready(self, client: TestClient, project: str) -> None:
        response = upload(client, llama3_zip(), project=project, filename="llama3.zip", content_type="application/zip")

        run = ingest(client, response)

        assert (run["ranks"], run["layer_count"], run["series_count"], run["points"]) == (1, 9, 24, 600)
        assert (run["lines_read"], run["lines_skipped"], run["iteration_min"], run["iteration_max"]) == (600, 0, 0, 240)
        assert run["ingest_report"]["archive"] == {"format": "zip", "skipped_members": 0, "skipped_samples": []}

    def test_llama3_raw_gzip_body_with_query_parameters(self, client: TestClient, project: str) -> None:
        response = upload_raw(
            client,
            llama3_tar_gz(),
            content_type="application/gzip",
            project=project,
            name="llama3 raw",
            tags="raw,llama3",
            metadata='{"recipe": "delayed"}',
        )

        body = response.json()
        run = ingest(client, response)

        assert (body["name"], body["project"], body["tags"], body["metadata"], body["upload_filename"]) == (
            "llama3 raw",
            project,
            ["raw", "llama3"],
            {"recipe": "delayed"},
            None,
        )
        assert (run["layer_count"], run["points"], run["ingest_report"]["archive"]["format"]) == (9, 600, "tar.gz")

    def test_same_bytes_in_the_same_project_answer_200_with_the_existing_run(
        self, client: TestClient, project: str, app_settings
    ) -> None:
        first = upload(client, esm2_tar_gz(), project=project)
        assert first.status_code == 202

        again = upload(client, esm2_tar_gz(), project=project, name="another name", filename="copy.tgz")

        assert again.status_code == 200
        assert again.json()["id"] == first.json()["id"]
        assert again.json()["name"] == "logs"  # the earlier run's name (its file's), not this upload's
        assert again.json()["duplicate_of"] == {"id": first.json()["id"], "name": "logs"}
        assert first.json()["duplicate_of"] is None
        assert again.headers["location"] == f"{RUNS}/{first.json()['id']}"
        assert list_ids(client, project=project) == [first.json()["id"]]
        wait_for_run(client, first.json()["id"])
        assert files_under(app_settings.data_dir / "uploads") == set()

    def test_same_bytes_in_another_project_create_a_new_run(self, client: TestClient, project: str) -> None:
        first = upload(client, esm2_tar_gz(), project=project)

        other = upload(client, esm2_tar_gz(), project=f"{project}-other")

        assert (first.status_code, other.status_code) == (202, 202)
        assert other.json()["id"] != first.json()["id"]
        assert other.json()["project"] == f"{project}-other"
        assert wait_for_run(client, other.json()["id"])["status"] == "ready"

    def test_single_stats_log_as_text_plain_body(self, client: TestClient, project: str) -> None:
        response = upload_raw(client, ESM2_STATS.read_bytes(), content_type="text/plain", project=project)

        run = ingest(client, response)

        # no metadata log: only the layers with stats, FP8 because their unprefixed FP8 stats say so
        assert (run["ranks"], run["layer_count"], run["points"], run["lines_read"]) == (1, 6, 1800, 1800)
        assert run["ingest_report"]["files"] == [clean_stats_file("upload.log", 1800)]
        assert run["ingest_report"]["archive"]["format"] == "log"
        layers = client.get(f"{RUNS}/{run['id']}/layers").json()
        assert [(layer["name"], layer["precision"]) for layer in layers] == [
            (ESM2_LAYER.format(k), "fp8") for k in range(1, 7)
        ]

    def test_log_gz_multipart_upload_takes_the_rank_from_the_file_name(self, client: TestClient, project: str) -> None:
        data = gz_bytes(LLAMA3_STATS.read_bytes())

        run = ingest(client, upload(client, data, project=project, filename="nvdlfw_inspect_globalrank-3.log.gz"))

        assert (run["ranks"], run["points"], run["ingest_report"]["archive"]["format"]) == (1, 600, "log.gz")
        assert run["ingest_report"]["files"][0]["path"] == "nvdlfw_inspect_globalrank-3.log.gz"
        series = series_of(client, run["id"], LLAMA3_QKV1, "activation", "underflows%").json()["series"]
        assert [s["rank"] for s in series] == [3]

    @pytest.mark.parametrize("ranks", [2, 8])
    def test_multi_rank_tree_reports_every_rank(
        self, client: TestClient, project: str, tmp_path: Path, ranks: int
    ) -> None:
        data = tree_tar_gz(multi_rank_tree(tmp_path / "fp8_logs", ranks))

        run = ingest(client, upload(client, data, project=project))

        assert (run["ranks"], run["layer_count"], run["series_count"], run["points"]) == (
            ranks,
            2,
            2 * ranks,
            10 * ranks,
        )
        assert [(f["kind"], f["rank"], f.get("stats_lines")) for f in run["ingest_report"]["files"]] == [
            *(("metadata", r, None) for r in range(ranks)),
            *(("stats", r, 10) for r in range(ranks)),
        ]
        series = series_of(client, run["id"], FC1, "activation", "underflows%").json()["series"]
        assert [s["rank"] for s in series] == list(range(ranks))
        assert series[-1]["values"] == [rank_value(ranks - 1, 1, it) for it in range(0, 50, 10)]

    @pytest.mark.parametrize("rank", [0, 1])
    def test_rank_parameter_filters_layers_series_and_csv(
        self, client: TestClient, project: str, tmp_path: Path, rank: int
    ) -> None:
        run = ingest(client, upload(client, tree_tar_gz(multi_rank_tree(tmp_path / "fp8_logs", 3)), project=project))
        run_id = run["id"]

        all_ranks = summary(client.get(f"{RUNS}/{run_id}/layers").json()[0], "activation", "underflows%")
        one_rank = summary(
            client.get(f"{RUNS}/{run_id}/layers", params={"rank": rank}).json()[0], "activation", "underflows%"
        )
        series = series_of(client, run_id, FC1, "activation", "underflows%", rank=rank).json()["series"]
        csv_text = client.get(f"{RUNS}/{run_id}/metrics.csv", params={"rank": rank}).text

        assert (all_ranks["ranks"], all_ranks["count"], all_ranks["max"]) == (3, 15, rank_value(2, 1, 40))
        assert (one_rank["ranks"], one_rank["count"]) == (1, 5)
        assert (one_rank["min"], one_rank["max"]) == (rank_value(rank, 1, 0), rank_value(rank, 1, 40))
        assert [(s["rank"], s["values"]) for s in series] == [
            (rank, [rank_value(rank, 1, i) for i in range(0, 50, 10)])
        ]
        assert set(pd.read_csv(io.StringIO(csv_text))["rank"]) == {rank}
        assert len(csv_text.splitlines()) == 1 + 10

    def test_appended_sessions_count_duplicates_and_the_last_value_wins(self, client: TestClient, project: str) -> None:
        names = [f"model.layers.{k}.fc1_activation_underflows%" for k in (1, 2)]
        first = [(n, it, 1.0 + it / 1000) for it in range(0, 50, 10) for n in names]
        second = [(n, it, 2.0 + it / 1000) for it in range(20, 70, 10) for n in names]  # 20..40 overlap

        run = ready_log(client, project, stats_log(first + second))

        assert (run["lines_read"], run["lines_duplicated"], run["points"]) == (20, 6, 14)
        values = series_of(client, run["id"], "model.layers.2.fc1", "activation", "underflows%").json()["series"][0]
        assert values["iterations"] == list(range(0, 70, 10))
        assert values["values"] == [1.0, 1.01, 2.02, 2.03, 2.04, 2.05, 2.06]

    def test_crlf_files_parse_like_lf_files(self, client: TestClient, project: str) -> None:
        stats = stats_log([(UF, it, it / 10) for it in range(0, 50, 10)], newline="\r\n")
        meta = metadata_log({FC1: "High Precision"}).replace(b"\n", b"\r\n")
        data = tar_bytes({stats_relpath(0): stats, meta_relpath(0): meta})

        run = ingest(client, upload(client, data, project=project))

        assert (run["lines_read"], run["lines_skipped"], run["lines_blank"], run["points"]) == (5, 0, 0, 5)
        assert run["ingest_report"]["files"][0]["lines_unrecognised"] == 0
        (layer,) = client.get(f"{RUNS}/{run['id']}/layers").json()
        assert (layer["name"], layer["precision"], layer["fp8"]) == (FC1, "high", False)
        values = series_of(client, run["id"], FC1, "activation", "underflows%").json()["series"][0]["values"]
        assert values == [0.0, 1.0, 2.0, 3.0, 4.0]

    def test_timestamped_sessions_are_read_oldest_first_and_the_plain_file_last(
        self, client: TestClient, project: str
    ) -> None:
        older = stats_log([(UF, it, 1.0) for it in (0, 10, 20)])
        newer = stats_log([(UF, it, 2.0) for it in (10, 20, 30)])
        plain = stats_log([(UF, it, 3.0) for it in (30, 40)])
        data = tar_bytes(
            [  # archive order is not session order
                (stats_relpath(0, "20260116_080000"), newer),
                (stats_relpath(0), plain),
                (stats_relpath(0, "20260115_230641"), older),
            ]
        )

        run = ingest(client, upload(client, data, project=project))

        assert [f["path"] for f in run["ingest_report"]["files"]] == [
            stats_relpath(0, "20260115_230641"),
            stats_relpath(0, "20260116_080000"),
            stats_relpath(0),
        ]
        assert (run["ranks"], run["lines_read"], run["lines_duplicated"], run["points"]) == (1, 8, 3, 5)
        series = series_of(client, run["id"], FC1, "activation", "underflows%").json()["series"][0]
        assert (series["iterations"], series["values"]) == ([0, 10, 20, 30, 40], [1.0, 2.0, 2.0, 3.0, 3.0])

    def test_tree_without_rank_directories(self, client: TestClient, project: str, tmp_path: Path) -> None:
        root = write_tree(
            tmp_path / "flat",
            {
                stats_relpath(0, rank_dir=False): tiny_log(0),
                stats_relpath(1, rank_dir=False): tiny_log(1),
                meta_relpath(0, rank_dir=False): metadata_log({FC1: "FP8 Quantize"}),
            },
        )

        run = ingest(client, upload(client, tree_tar_gz(root), project=project))

        assert (run["ranks"], run["layer_count"], run["points"]) == (2, 1, 6)
        (layer,) = client.get(f"{RUNS}/{run['id']}/layers").json()
        assert (layer["precision"], layer["plans"]["activation/fprop"]) == ("fp8", "FP8 Quantize")


# --- GET /api/v1/runs/{id} -----------------------------------------------------------------------------------


# --- GET /api/v1/runs -------------------------------------------------------------------------------------------


# --- GET /api/v1/runs/{id}/layers --------------------------------------------------------------------------------


# --- GET /api/v1/runs/{id}/series ---------------------------------------------------------------------------------


# --- GET /api/v1/runs/{id}/metrics.csv ------------------------------------------------------------------------------


# --- DELETE /api/v1/runs/{id} --------------------------------------------------------------------------------------


# --- GET /healthz ----------------------------------------------------------------------------------------------------
