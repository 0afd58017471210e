"""A few small stored runs for the API-wide tests (response models, schema fuzzing): planted-pattern synthetic
runs cut to 200 iterations, a hand-written log with NaN and ±inf points, and a run whose ingest failed.
Uploaded through the API and waited for, like a user would."""

from __future__ import annotations

import dataclasses
import gzip
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fastapi.testclient import TestClient

from fp8_policy.db.migrate import upgrade
from fp8_policy.policy.synthetic import SCENARIOS, write_run
from fp8_policy.service.app import create_app
from fp8_policy.service.settings import Settings
from tests.conftest import wait_for_run
from tests.support.archives import stats_log, tree_tar_gz
from tests.support.uvicorn_app import plain_config, serving

SCENARIO_RUNS = ("u_shape", "rank_outlier", "overflow", "rising_trend")
NONFINITE_LAYERS = ("model.layers.1.self_attention.proj", "model.layers.2.mlp.fc1", "model.lm_head")


def nonfinite_log() -> bytes:
    """A statistics log whose series hold NaN, +inf and -inf points besides finite ones."""
    specials = (math.nan, math.inf, -math.inf)
    points = []
    for k, layer in enumerate(NONFINITE_LAYERS):
        for tensor in ("gradient", "activation", "weight"):
            for stat in ("underflows%", "scale_inv_min", "scale_inv_max", "overflows%"):
                for it in range(0, 100, 5):
                    value = specials[(it // 5 + k) % 3] if it % 15 == 0 and stat != "overflows%" else 0.5 + 0.01 * it
                    points.append((f"{layer}_{tensor}_{stat}", it, value))
    return stats_log(points)


def upload_runs(client: TestClient, tmp_path: Path, project: str) -> dict[str, int]:
    """name -> run id; every run but `failed` is ready."""
    ids: dict[str, int] = {}
    for name in SCENARIO_RUNS:
        tree = tmp_path / name
        write_run(dataclasses.replace(SCENARIOS[name].run, iterations=200), tree)
        response = client.post(
            "/api/v1/runs",
            files={"file": (f"{name}.tgz", tree_tar_gz(tree))},
            data={
                "project": project,
                "name": name,
                "tags": f"synthetic,{name}",
                "metadata": '{"gpu": "H100", "recipe": "DelayedScaling", "hidden_size": 1280}',
            },
        )
        assert response.status_code == 202, response.text
        ids[name] = response.json()["id"]
    raw = {"nonfinite": ("application/gzip", None), "failed": ("text/plain", b"no statistics here\n" * 10)}
    for name, (content_type, body) in raw.items():
        data = gzip.compress(nonfinite_log()) if body is None else body
        response = client.post(
            "/api/v1/runs",
            content=data,
            headers={"Content-Type": content_type},
            params={"project": project, "name": name},
        )
        assert response.status_code == 202, response.text
        ids[name] = response.json()["id"]
    for name, run_id in ids.items():
        body = wait_for_run(client, run_id, timeout=120)
        assert body["status"] == ("failed" if name == "failed" else "ready"), (name, body["error"])
    return ids


def sqlite_settings(root: Path, **settings: object) -> Settings:
    """Settings of an app on a fresh, migrated SQLite database and data directory under `root`."""
    url = f"sqlite+pysqlite:///{root / 'app.db'}"
    upgrade(url)
    return Settings(_env_file=None, data_dir=root / "data", database_url=url, **settings)


def sqlite_client(root: Path, **settings: object) -> Iterator[TestClient]:
    """The real app (with its lifespan) on a fresh, migrated SQLite database under `root`."""
    with TestClient(create_app(sqlite_settings(root, **settings))) as client:
        yield client


@contextmanager
def live_server(settings: Settings) -> Iterator[str]:
    """The app under uvicorn on a free 127.0.0.1 port (in a thread); yields its base URL."""
    with serving(plain_config(settings), name="api-uvicorn") as port:
        yield f"http://127.0.0.1:{port}"
