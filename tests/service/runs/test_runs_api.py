"""API tests for /api/v1/runs and /healthz: one class per endpoint, one scenario per test, on SQLite and PostgreSQL.

The database is shared by every test of a backend, so each test works in its own `project` and only looks at
its own runs. Uploads are the real bionemo ESM2 / Llama3 trees (read from ../shared, never copied) or small
synthetic nvdlfw_inspect logs written under tmp_path.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from datetime import datetime
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from fp8_policy.policy.synthetic import PLAN_ORDER
from tests.conftest import RUN_FIGURES, upload, wait_for_run
from tests.support.archives import (
    ESM2_STATS,
    LLAMA3_STATS,
    TS,
    esm2_tar_gz,
    gz_bytes,
    llama3_tar_gz,
    llama3_zip,
    meta_relpath,
    metadata_log,
    multi_rank_tree,
    parse_reference,
    rank_value,
    stats_log,
    stats_relpath,
    tar_bytes,
    tree_tar_gz,
    write_tree,
)
from tests.support.dbutil import files_under, insert_run, row_counts

RUNS = "/api/v1/runs"
ESM2_LAYER = "model.esm.encoder.layers.{}.self_attention.layernorm_qkv"
QKV1 = ESM2_LAYER.format(1)
LLAMA3_QKV1 = "model.model.layers.1.self_attention.layernorm_qkv"
ESM2_LAYERS = [
    *(
        name.format(k)
        for k in range(1, 7)
        for name in (
            "model.esm.encoder.layers.{}.self_attention.layernorm_qkv",
            "model.esm.encoder.layers.{}.self_attention.proj",
            "model.esm.encoder.layers.{}.layernorm_mlp.fc1",
            "model.esm.encoder.layers.{}.layernorm_mlp.fc2",
        )
    ),
    "model.lm_head.decoder",
    "model.lm_head.dense",
]
SUBLAYERS = ["qkv", "proj", "fc1", "fc2"]
STATS = ("underflows%", "scale_inv_min", "scale_inv_max", "mse")
TENSORS = ("activation", "gradient", "weight")
FC1 = "model.layers.1.fc1"
UF = f"{FC1}_activation_underflows%"


# --- helpers ---------------------------------------------------------------------------------------------


def clean_stats_file(path: str, lines: int) -> dict[str, object]:
    """The ingest report's entry for a rank-0 statistics log read whole: every line a statistics line, one session
    (read as logged, no iteration offset)."""
    return {
        "path": path,
        "rank": 0,
        "kind": "stats",
        "lines_read": lines,
        "stats_lines": lines,
        "blank_lines": 0,
        "skipped_lines": 0,
        "skipped_samples": [],
        "iteration_offset": 0,
    }


def upload_raw(client: TestClient, data: bytes, *, content_type: str, **params: str) -> httpx.Response:
    """Raw-body upload with the fields as query parameters."""
    return client.post(RUNS, content=data, headers={"Content-Type": content_type}, params=params)


def ingest(client: TestClient, response: httpx.Response, status: str = "ready") -> dict:
    assert response.status_code == 202, response.text
    run = wait_for_run(client, response.json()["id"])
    assert run["status"] == status, run["error"]
    return run


def ready_esm2(client: TestClient, project: str) -> dict:
    return ingest(client, upload(client, esm2_tar_gz(), project=project, filename="esm2.tar.gz"))


def ready_log(client: TestClient, project: str, data: bytes, filename: str = "stats.log") -> dict:
    return ingest(client, upload(client, data, project=project, filename=filename, content_type="text/plain"))


def tiny_log(tag: int) -> bytes:
    """A small valid stats log whose bytes differ per tag (so uploads do not deduplicate)."""
    return stats_log([(UF, it, tag + it / 100) for it in range(0, 30, 10)])


def series_of(client: TestClient, run_id: int, layer: str, tensor: str, stat: str, **params) -> httpx.Response:
    return client.get(f"{RUNS}/{run_id}/series", params={"layer": layer, "tensor": tensor, "stat": stat, **params})


def summary(layer: dict, tensor: str, stat: str) -> dict:
    (found,) = [s for s in layer["stats"] if s["tensor"] == tensor and s["stat"] == stat]
    return found


def list_ids(client: TestClient, **params) -> list[int]:
    response = client.get(RUNS, params=params)
    assert response.status_code == 200, response.text
    return [run["id"] for run in response.json()["items"]]


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


# --- GET /api/v1/runs -------------------------------------------------------------------------------------------


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


# --- GET /api/v1/runs/{id}/layers --------------------------------------------------------------------------------


class TestListLayers:
    def test_esm2_layers_in_model_order_with_structure_and_precision(self, client: TestClient, project: str) -> None:
        run_id = ready_esm2(client, project)["id"]

        layers = client.get(f"{RUNS}/{run_id}/layers").json()

        assert [layer["name"] for layer in layers] == ESM2_LAYERS
        body = layers[:24]
        assert [(x["group"], x["index"], x["sublayer"]) for x in body] == [
            ("body", k, s) for k in range(1, 7) for s in SUBLAYERS
        ]
        assert {(x["precision"], x["fp8"]) for x in body} == {("fp8", True)}
        assert [x["has_fp8_stats"] for x in body] == [s == "qkv" for _ in range(6) for s in SUBLAYERS]
        assert [
            (x["group"], x["index"], x["sublayer"], x["precision"], x["fp8"], x["has_fp8_stats"], x["stats"])
            for x in layers[24:]
        ] == [
            ("head", None, "lm_head.decoder", "high", False, False, []),
            ("head", None, "lm_head.dense", "high", False, False, []),
        ]
        assert set(layers[25]["plans"].values()) == {"High Precision"}
        assert layers[0]["plans"] == {f"{tensor}/{gemm}": "FP8 Quantize" for tensor, gemm in PLAN_ORDER}

    def test_layernorm_qkv_summaries_match_a_direct_computation_from_the_log(
        self, client: TestClient, project: str
    ) -> None:
        run_id = ready_esm2(client, project)["id"]
        reference = parse_reference(ESM2_STATS)

        layers = {x["name"]: x for x in client.get(f"{RUNS}/{run_id}/layers").json()}

        assert summary(layers[QKV1], "gradient", "underflows%")["max"] == 21.4681
        for k in range(1, 7):
            stats = layers[ESM2_LAYER.format(k)]["stats"]
            assert len(stats) == 12
            for tensor in TENSORS:
                for stat in STATS:
                    points = reference[f"{ESM2_LAYER.format(k)}_{tensor}_{stat}"]
                    values = np.array([points[i] for i in sorted(points)])
                    got = summary(layers[ESM2_LAYER.format(k)], tensor, stat)
                    assert {
                        key: got[key]
                        for key in (
                            "base_stat",
                            "recipe",
                            "columnwise",
                            "count",
                            "nan_count",
                            "inf_count",
                            "ranks",
                            "min",
                            "max",
                            "last",
                        )
                    } == {
                        "base_stat": stat,
                        "recipe": None,
                        "columnwise": False,
                        "count": 25,
                        "nan_count": 0,
                        "inf_count": 0,
                        "ranks": 1,
                        "min": values.min(),
                        "max": values.max(),
                        "last": values[-1],
                    }
                    assert got["mean"] == pytest.approx(values.mean(), rel=1e-12, abs=1e-15)
                    assert got["p95"] == pytest.approx(np.percentile(values, 95), rel=1e-12, abs=1e-15)

    def test_queued_run_is_409_not_ready(self, client: TestClient, db_engine: Engine, project: str) -> None:
        run_id = insert_run(db_engine, project, status="queued")

        response = client.get(f"{RUNS}/{run_id}/layers")

        assert response.status_code == 409
        assert response.json() == {"error": "NotReady", "detail": f"run {run_id} is queued; try again when it is ready"}

    def test_failed_run_is_409_with_its_error(self, client: TestClient, project: str) -> None:
        run = ingest(
            client,
            upload(client, b"\x00" * 1024 + b"x", project=project, content_type="application/octet-stream"),
            status="failed",
        )

        response = client.get(f"{RUNS}/{run['id']}/layers")

        assert response.status_code == 409
        assert response.json() == {"error": "NotReady", "detail": f"run {run['id']} is failed: {run['error']}"}
        assert run["error"].startswith("NotAnArchive: ")

    def test_unknown_run_is_404(self, client: TestClient) -> None:
        response = client.get(f"{RUNS}/987654321/layers")

        assert response.status_code == 404
        assert response.json() == {"error": "NotFound", "detail": "run 987654321 does not exist"}


# --- GET /api/v1/runs/{id}/series ---------------------------------------------------------------------------------


class TestReadSeries:
    def test_esm2_series_has_every_tenth_iteration_and_the_logged_values(
        self, client: TestClient, project: str
    ) -> None:
        run_id = ready_esm2(client, project)["id"]
        points = parse_reference(ESM2_STATS)[f"{QKV1}_gradient_underflows%"]

        response = series_of(client, run_id, QKV1, "gradient", "underflows%")

        assert response.status_code == 200
        assert response.json() == {
            "layer": QKV1,
            "tensor": "gradient",
            "stat": "underflows%",
            "series": [
                {"rank": 0, "iterations": list(range(0, 250, 10)), "values": [points[i] for i in sorted(points)]}
            ],
        }
        assert response.json()["series"][0]["values"][0] == 21.4681

    def test_unknown_layer_is_404(self, client: TestClient, project: str) -> None:
        run_id = ready_esm2(client, project)["id"]

        response = series_of(client, run_id, "model.nope", "gradient", "underflows%")

        assert response.status_code == 404
        assert response.json() == {
            "error": "NotFound",
            "detail": f"run {run_id} has no series 'model.nope' / 'gradient' / 'underflows%'",
        }

    def test_unknown_rank_is_404(self, client: TestClient, project: str) -> None:
        run_id = ready_esm2(client, project)["id"]

        response = series_of(client, run_id, QKV1, "gradient", "underflows%", rank=5)

        assert response.status_code == 404
        assert response.json() == {
            "error": "NotFound",
            "detail": f"run {run_id} has no series {QKV1!r} / 'gradient' / 'underflows%' on rank 5",
        }

    def test_run_not_ready_is_409(self, client: TestClient, db_engine: Engine, project: str) -> None:
        run_id = insert_run(db_engine, project, status="processing")

        response = series_of(client, run_id, QKV1, "gradient", "underflows%")

        assert response.status_code == 409
        assert response.json() == {
            "error": "NotReady",
            "detail": f"run {run_id} is processing; try again when it is ready",
        }

    def test_nan_and_infinities_come_back_as_strings(self, client: TestClient, project: str) -> None:
        values = [1.5, math.nan, math.inf, -0.0, -math.inf]
        run = ready_log(client, project, stats_log([(UF, 10 * k, v) for k, v in enumerate(values)]))

        response = series_of(client, run["id"], FC1, "activation", "underflows%")

        got = response.json()["series"][0]["values"]
        assert got == [1.5, "NaN", "Infinity", 0.0, "-Infinity"]
        assert math.copysign(1.0, got[3]) == -1.0
        (layer,) = client.get(f"{RUNS}/{run['id']}/layers").json()
        stat = summary(layer, "activation", "underflows%")
        assert (stat["count"], stat["nan_count"], stat["inf_count"], stat["min"], stat["max"], stat["last"]) == (
            5,
            1,
            2,
            -0.0,
            1.5,
            None,
        )


# --- GET /api/v1/runs/{id}/metrics.csv ------------------------------------------------------------------------------


class TestExportCsv:
    def test_long_layout_has_one_row_per_point(self, client: TestClient, project: str) -> None:
        run_id = ready_esm2(client, project)["id"]

        response = client.get(f"{RUNS}/{run_id}/metrics.csv")

        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/csv")
        assert response.headers["content-disposition"] == f'attachment; filename="run_{run_id}_metrics.csv"'
        text = response.text
        assert text.splitlines()[0] == "rank,layer,tensor,recipe,stat,iteration,value"
        assert len(text.splitlines()) == 1800 + 1
        frame = pd.read_csv(io.StringIO(text))
        assert list(frame.columns) == ["rank", "layer", "tensor", "recipe", "stat", "iteration", "value"]
        assert frame["recipe"].isna().all()
        assert sorted(frame["layer"].unique()) == sorted(ESM2_LAYER.format(k) for k in range(1, 7))
        reference = parse_reference(ESM2_STATS)
        got = {(f"{r.layer}_{r.tensor}_{r.stat}", r.iteration): r.value for r in frame.itertuples()}
        assert got == {(name, i): v for name, points in reference.items() for i, v in points.items()}

    def test_bionemo_layout_is_metric_name_iteration_value(self, client: TestClient, project: str) -> None:
        run_id = ready_esm2(client, project)["id"]

        response = client.get(f"{RUNS}/{run_id}/metrics.csv", params={"layout": "bionemo"})

        assert response.headers["content-disposition"] == f'attachment; filename="run_{run_id}_metrics_bionemo.csv"'
        text = response.text
        assert text.splitlines()[0] == "metric_name,iteration,value"
        assert len(text.splitlines()) == 1800 + 1
        frame = pd.read_csv(io.StringIO(text))
        reference = parse_reference(ESM2_STATS)
        assert set(frame["metric_name"]) == set(reference)
        got = {(r.metric_name, r.iteration): r.value for r in frame.itertuples()}
        assert got == {(name, i): v for name, points in reference.items() for i, v in points.items()}

    def test_nonfinite_values_are_written_as_the_log_printed_them(self, client: TestClient, project: str) -> None:
        run = ready_log(client, project, stats_log([(UF, 0, math.nan), (UF, 10, math.inf), (UF, 20, -math.inf)]))

        text = client.get(f"{RUNS}/{run['id']}/metrics.csv", params={"layout": "bionemo"}).text

        assert text.splitlines() == ["metric_name,iteration,value", f"{UF},0,nan", f"{UF},10,inf", f"{UF},20,-inf"]
        values = pd.read_csv(io.StringIO(text))["value"].tolist()
        assert math.isnan(values[0]) and values[1:] == [math.inf, -math.inf]

    def test_run_not_ready_is_409(self, client: TestClient, db_engine: Engine, project: str) -> None:
        run_id = insert_run(db_engine, project, status="queued")

        response = client.get(f"{RUNS}/{run_id}/metrics.csv")

        assert response.status_code == 409
        assert response.json() == {"error": "NotReady", "detail": f"run {run_id} is queued; try again when it is ready"}


# --- DELETE /api/v1/runs/{id} --------------------------------------------------------------------------------------


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


# --- GET /healthz ----------------------------------------------------------------------------------------------------


class TestHealthz:
    def test_ok_with_a_database_round_trip(self, client: TestClient) -> None:
        response = client.get("/healthz")

        assert response.status_code == 200
        assert response.json() == {"status": "ok", "database": "ok"}
