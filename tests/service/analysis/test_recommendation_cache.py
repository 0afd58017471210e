"""GET/POST /recommendation: computed once per (run as stored, options, policy version), also under concurrency."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fp8_policy.service.analysis import actions, routes
from fp8_policy.service.single_flight import SingleFlightCache
from tests.service.analysis.test_analysis_api import upload_scenario

# An option (the GPU the run's metadata names already): answers without options are read from the run's stored
# summary and never reach this cache (service/analysis/summary.py), so the cache's tests ask with one.
HOPPER = {"gpu_arch": "hopper"}


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every computation of a recommendation, made slow enough that concurrent requests overlap."""
    calls: list[int] = []
    real = actions.recommendation_for

    def slow(session, run_id, overrides):
        calls.append(run_id)
        time.sleep(0.5)
        return real(session, run_id, overrides)

    monkeypatch.setattr(actions, "recommendation_for", slow)
    return calls


def test_concurrent_identical_requests_compute_once(
    make_client, tmp_path: Path, project: str, counted: list[int]
) -> None:
    # each request that computes or waits for the computation holds a place in the analysis lane (service/lanes.py):
    # 4 at once need 1 running + 3 waiting places (the 2-core default has 1 + 2: the fourth would be 429)
    client: TestClient = make_client(compute_running=1, compute_waiting=3)
    run_id = upload_scenario(client, tmp_path, project, "head_only")
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: client.get(f"/api/v1/runs/{run_id}/recommendation", params=HOPPER), range(4)))
    assert [a.status_code for a in answers] == [200] * 4
    assert all(a.json() == answers[0].json() for a in answers)
    assert counted == [run_id]
    # a cached answer is the same as a fresh computation, and rendered formats use it too
    assert (
        client.get(f"/api/v1/runs/{run_id}/recommendation", params={**HOPPER, "format": "te-yaml"}).status_code == 200
    )
    assert counted == [run_id]


def test_each_answer_is_serialized_once_per_format(
    client: TestClient, tmp_path: Path, project: str, counted: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = upload_scenario(client, tmp_path, project, "head_only")
    serialized: list[int] = []
    real = routes._json_body

    def counting(run: int, rec):
        serialized.append(run)
        return real(run, rec)

    monkeypatch.setattr(routes, "_json_body", counting)
    first = client.get(f"/api/v1/runs/{run_id}/recommendation", params=HOPPER)
    second = client.get(f"/api/v1/runs/{run_id}/recommendation", params=HOPPER)
    yaml_text = client.get(f"/api/v1/runs/{run_id}/recommendation", params={**HOPPER, "format": "te-yaml"})
    assert first.status_code == second.status_code == yaml_text.status_code == 200
    assert first.headers["content-type"] == "application/json" and first.content == second.content
    assert first.json()["run_id"] == run_id and "model.lm_head" in first.json()["fp8_skip_layers"]
    assert serialized == [run_id] and counted == [run_id]


def test_other_options_are_computed_separately(
    client: TestClient, tmp_path: Path, project: str, counted: list[int]
) -> None:
    run_id = upload_scenario(client, tmp_path, project, "head_only")
    default = client.get(f"/api/v1/runs/{run_id}/recommendation").json()
    loose = client.get(f"/api/v1/runs/{run_id}/recommendation", params={"warning": 20, "critical": 30, "severe": 40})
    severe = client.get(f"/api/v1/runs/{run_id}/recommendation", params={"critical": 3})
    assert loose.status_code == 200 and severe.status_code == 200
    assert (
        len(counted) == 2
    )  # the default is the one stored at ingest (tests/service/analysis/test_stored_recommendation.py)
    assert "model.lm_head" in default["fp8_skip_layers"]
    assert "model.lm_head" not in loose.json()["fp8_skip_layers"]
    # the same options sent as a POST body are the same key
    posted = client.post(
        f"/api/v1/runs/{run_id}/recommendation", json={"thresholds": {"warning": 20, "critical": 30, "severe": 40}}
    )
    assert posted.json() == loose.json()
    assert client.get(f"/api/v1/runs/{run_id}/recommendation").json() == default
    assert len(counted) == 2


def test_refusals_are_not_cached(client: TestClient, tmp_path: Path, project: str, counted: list[int]) -> None:
    run_id = upload_scenario(client, tmp_path, project, "head_only")
    for _ in range(2):  # options no run could take: refused before any computation (and before the lane)
        response = client.post(f"/api/v1/runs/{run_id}/recommendation", json={"no_such_option": 1})
        assert response.status_code == 400 and response.json()["error"] == "InvalidOverrides"
    assert counted == []
    for _ in range(2):  # refused by the computation itself: computed again each time, never cached
        response = client.post(f"/api/v1/runs/{run_id}/recommendation", json={"previous_run": run_id})
        assert response.status_code == 400 and response.json()["error"] == "InvalidOverrides"
    assert len(counted) == 2


def test_a_failure_reaches_every_waiter_and_the_next_call_computes_again() -> None:
    cache = SingleFlightCache()
    started, release = threading.Event(), threading.Event()

    def failing() -> int:
        started.set()
        release.wait(5)
        raise ValueError("boom")

    errors: list[BaseException] = []

    def call() -> None:
        try:
            cache.get("k", failing)
        except ValueError as exc:
            errors.append(exc)

    first = threading.Thread(target=call)
    first.start()
    started.wait(5)
    second = threading.Thread(target=call)
    second.start()
    time.sleep(0.1)
    release.set()
    first.join(5)
    second.join(5)
    assert len(errors) == 2 and cache.computed == 1
    assert cache.get("k", lambda: 7) == 7 and cache.computed == 2
    assert cache.get("k", lambda: 8) == 7


def test_the_cache_is_bounded() -> None:
    cache = SingleFlightCache(max_entries=2)
    for key in range(3):
        cache.get(key, lambda key=key: key)
    assert cache.get(0, lambda: "again") == "again"
