"""GET /api/v1/runs?gpu=&recipe=&te_version=&git_commit=: the runs list filtered by the metadata's facets on the
server (stored with the run, any spelling of the same GPU or recipe), bad values 400, on SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from tests.conftest import upload
from tests.support.archives import stats_log

RUNS = "/api/v1/runs"
METADATA = {
    "h100": {
        "gpu": "NVIDIA H100 80GB HBM3",
        "recipe": "DelayedScaling",
        "te_version": "2.8.0+cu128",
        "git_commit": "3f2a9c1d00",
    },
    "b200": {"gpu_name": "B200", "fp8_recipe": "MXFP8BlockScaling", "te_version": "2.10.0", "commit": "ABCDEF1234"},
    "v280": {"gpu": "h100-sxm", "recipe": "mxfp8", "te_version": "2.80.1"},
    "bare": {},
}


def runs_of(client: TestClient, project: str) -> dict[str, int]:
    ids = {}
    for k, (name, metadata) in enumerate(METADATA.items()):
        log = stats_log([("model.layers.1.mlp.fc1_gradient_underflows%", it, k + it / 100) for it in (0, 10)])
        response = upload(
            client, log, project=project, content_type="text/plain", name=name, metadata=json.dumps(metadata)
        )
        assert response.status_code == 202, response.text
        ids[name] = response.json()["id"]
    return ids


def names(client: TestClient, ids: dict[str, int], project: str, **params: str) -> set[str]:
    response = client.get(RUNS, params={"project": project, **params})
    assert response.status_code == 200, response.text
    by_id = {v: k for k, v in ids.items()}
    return {by_id[run["id"]] for run in response.json()["items"]}


def test_each_facet_filters_in_any_spelling(client: TestClient, project: str) -> None:
    ids = runs_of(client, project)

    assert names(client, ids, project, gpu="H100") == {"h100", "v280"}
    assert names(client, ids, project, gpu="hopper") == set()  # an architecture is not a product
    assert names(client, ids, project, gpu="nvidia b200 180gb") == {"b200"}
    assert names(client, ids, project, recipe="mxfp8") == {"b200", "v280"}
    assert names(client, ids, project, recipe="transformer_engine.common.recipe.DelayedScaling") == {"h100"}
    assert names(client, ids, project, te_version="2.8") == {"h100"}  # not 2.80.1
    assert names(client, ids, project, te_version="2") == {"h100", "b200", "v280"}
    assert names(client, ids, project, git_commit="abcdef") == {"b200"}
    assert names(client, ids, project, gpu="h100", recipe="mxfp8") == {"v280"}
    assert names(client, ids, project) == set(METADATA)


def test_a_filter_pages_with_the_cursor(client: TestClient, project: str) -> None:
    ids = runs_of(client, project)
    first = client.get(RUNS, params={"project": project, "gpu": "H100", "limit": 1}).json()
    second = client.get(RUNS, params={"project": project, "gpu": "H100", "limit": 1, "cursor": first["next_cursor"]})

    assert [r["id"] for r in first["items"] + second.json()["items"]] == [ids["v280"], ids["h100"]]
    assert second.json()["next_cursor"] is None


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"gpu": ""}, "gpu is blank"),
        ({"recipe": "  "}, "recipe is blank"),
        ({"gpu": "x" * 101}, "longer than 100"),
        ({"te_version": "latest"}, "not a version"),
        ({"git_commit": "3f2a 9c1d"}, "not a commit id"),
        ({"te_version": "2.8 beta"}, "not a version"),
        ({"gpu": "H100\nB200"}, "control character"),
    ],
)
def test_bad_values_are_400_with_the_error_shape(client: TestClient, params: dict[str, str], says: str) -> None:
    response = client.get(RUNS, params=params)

    assert response.status_code == 400, response.text
    body = response.json()
    assert body["error"] == "InvalidParameter" and says in body["detail"], body
