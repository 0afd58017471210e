"""The response models lose nothing: for real stored runs, each JSON endpoint's response equals the dict the code
behind it builds (`Analysis.to_dict()`, `Recommendation.to_dict()`, `heatmap_layout()`, `compare_runs()`).

FastAPI filters a response through its `response_model`, so a key added to one of those dicts without a field in
service/analysis/schemas.py or service/visual/schemas.py would silently never reach a client. This test names the
key and the model module to extend.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fp8_policy.policy.thresholds import Thresholds
from fp8_policy.service.analysis.actions import load_and_analyze, recommendation_for
from fp8_policy.service.compare.pair import compare_runs
from fp8_policy.service.visual.actions import heatmap_layout
from fp8_policy.service.visual.params import parse_heatmap_params
from tests.support.api_runs import sqlite_client, upload_runs

MODELS = {
    "analysis": "service/analysis/schemas.py (AnalysisRead)",
    "recommendation": "service/analysis/schemas.py (RecommendationRead)",
    "heatmap.json": "service/visual/schemas.py (HeatmapLayoutRead)",
    "compare": "service/visual/schemas.py (CompareRead)",
}


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, dict[str, int]]]:
    root = tmp_path_factory.mktemp("response-models")
    for client in sqlite_client(root):
        yield client, upload_runs(client, root, "models")


def differences(expected: Any, actual: Any, path: str = "$") -> list[str]:
    """Where `actual` (the API's JSON) differs from `expected` (the code's dict, as JSON)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = [f"{path}.{key}: missing from the response" for key in expected if key not in actual]
        out += [f"{path}.{key}: in the response only" for key in actual if key not in expected]
        for key in expected.keys() & actual.keys():
            out += differences(expected[key], actual[key], f"{path}.{key}")
        return out
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [
            d for k, (e, a) in enumerate(zip(expected, actual, strict=True)) for d in differences(e, a, f"{path}[{k}]")
        ]
    same = (
        expected == actual
        and type(expected) is type(actual)
        or (
            isinstance(expected, (int, float))
            and isinstance(actual, (int, float))
            and not isinstance(expected, bool)
            and expected == actual
        )
    )
    return [] if same else [f"{path}: {expected!r} became {actual!r}"]


def _as_json(value: Any) -> Any:
    return json.loads(json.dumps(value, allow_nan=True, default=str))


def _check(endpoint: str, expected: Any, response) -> None:
    assert response.status_code == 200, response.text
    found = differences(_as_json(expected), response.json())
    assert not found, (
        f"GET {endpoint} does not return what the code builds; extend {MODELS[endpoint]} "
        f"(FastAPI drops undeclared keys):\n" + "\n".join(found[:20])
    )


def test_analysis_and_recommendation_carry_every_key(api) -> None:
    client, ids = api
    for name, run_id in ids.items():
        if name == "failed":
            continue
        with client.app.state.unit_of_work() as session:
            analysis = {"run_id": run_id, **load_and_analyze(session, run_id)[1].to_dict()}
            recommendation = {"run_id": run_id, **recommendation_for(session, run_id, None).to_dict()}
        _check("analysis", analysis, client.get(f"/api/v1/runs/{run_id}/analysis"))
        _check("recommendation", recommendation, client.get(f"/api/v1/runs/{run_id}/recommendation"))
        with client.app.state.unit_of_work() as session:
            custom = {"run_id": run_id, **load_and_analyze(session, run_id, Thresholds(critical=3.0))[1].to_dict()}
        _check("analysis", custom, client.get(f"/api/v1/runs/{run_id}/analysis", params={"critical": 3}))


@pytest.mark.parametrize(
    "query",
    [
        {},
        {"stat": "scale_inv_min"},
        {"sublayer": "fc1", "show_skip": "false"},
        {"tensor": "activation", "rank": "0", "dpi": "80"},
    ],
)
def test_heatmap_layout_carries_every_key(api, query: dict[str, str]) -> None:
    client, ids = api
    for name, run_id in ids.items():
        if name == "failed":
            continue
        with client.app.state.unit_of_work() as session:
            expected = heatmap_layout(session, run_id, parse_heatmap_params(query))
        _check("heatmap.json", expected, client.get(f"/api/v1/runs/{run_id}/heatmap.json", params=query))


def test_compare_carries_every_key(api) -> None:
    client, ids = api
    pairs = [
        ("u_shape", "rising_trend"),
        ("rank_outlier", "u_shape"),
        ("nonfinite", "overflow"),
        ("overflow", "overflow"),
    ]
    for base, head in pairs:
        with client.app.state.unit_of_work() as session:
            expected = compare_runs(session, ids[base], ids[head], Thresholds())
        _check("compare", expected, client.get("/api/v1/compare", params={"base": ids[base], "head": ids[head]}))
