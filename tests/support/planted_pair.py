"""The before/after pair of planted runs the heatmap and compare API tests read (tests/service/visual/,
tests/service/compare/): one started app per backend and module (`visual_client`), the pair uploaded once per module
(`planted`; ingest is the slow part, every test only reads). The fixtures reach the tests through each folder's
conftest.py."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fp8_policy.policy.synthetic import Rule, Scenario, SyntheticRun, first_blocks, heads, level, write_run
from fp8_policy.service.app import create_app
from fp8_policy.service.settings import Settings
from tests.conftest import wait_for_run
from tests.support.archives import tree_tar_gz

HEAD = "model.lm_head"
BLOCKS = 6
GRAD, UF = "gradient", "underflows%"


def before_after_runs() -> tuple[SyntheticRun, SyntheticRun]:
    """`before`: lm_head gradient underflow 6-10 % (hot) and activation 2.5-4 % (so the recommendation skips the
    whole layer), body gradient 1.2 %; `after`: lm_head in BF16, body gradient 0.8 %."""

    def run(body: float, bf16: frozenset[str]) -> SyntheticRun:
        rules = (
            Rule(heads(), level((6.0, 10.0), noise=0.05), GRAD, UF),
            Rule(heads(), level((2.5, 4.0), noise=0.05), "activation", UF),
            Rule(first_blocks(BLOCKS), level(body, noise=0.02), GRAD, UF),
        )
        return SyntheticRun(
            family="llama",
            num_layers=BLOCKS,
            iterations=200,
            freq=10,
            seed=21,
            profile=Scenario(rules),
            bf16_layers=bf16,
        )

    return run(1.2, frozenset()), run(0.8, frozenset({HEAD}))


@dataclass(frozen=True)
class PlantedRuns:
    before: int
    after: int


@pytest.fixture(scope="module")
def visual_client(migrated_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(_env_file=None, data_dir=tmp_path_factory.mktemp("visual") / "data", database_url=migrated_url)
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture(scope="module")
def planted(visual_client: TestClient, tmp_path_factory: pytest.TempPathFactory) -> PlantedRuns:
    project = f"visual-{uuid.uuid4().hex}"
    ids = []
    for name, run in zip(("before", "after"), before_after_runs(), strict=True):
        root: Path = tmp_path_factory.mktemp(name)
        write_run(run, root)
        response = visual_client.post(
            "/api/v1/runs", files={"file": (f"{name}.tgz", tree_tar_gz(root))}, data={"name": name, "project": project}
        )
        assert response.status_code == 202, response.text
        body = wait_for_run(visual_client, response.json()["id"])
        assert body["status"] == "ready", body
        ids.append(body["id"])
    return PlantedRuns(*ids)
