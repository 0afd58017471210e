"""API tests for a stored run's layers, series and CSV export (GET /api/v1/runs/{id}/layers, .../series, .../metrics.csv):
one class per endpoint, one scenario per test, on SQLite and PostgreSQL.

The database is shared by every test of a backend, so each test works in its own `project` and only looks at
its own runs (uploads: tests/service/runs/run_uploads.py).
"""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from fp8_policy.policy.synthetic import PLAN_ORDER
from tests.conftest import upload
from tests.service.runs.run_uploads import (
    ESM2_LAYER,
    ESM2_LAYERS,
    FC1,
    QKV1,
    RUNS,
    STATS,
    SUBLAYERS,
    TENSORS,
    UF,
    ingest,
    ready_esm2,
    ready_log,
    series_of,
    summary,
)
from tests.support.archives import (
    ESM2_STATS,
    parse_reference,
    stats_log,
)
from tests.support.dbutil import insert_run


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
