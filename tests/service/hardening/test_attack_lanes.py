"""Attack replay, compute lanes (SQLite and PostgreSQL): recomputes with new settings had no bound (about 6 s of CPU
each on a 2,722-layer run; twelve distinct thresholds at once made an unrelated GET wait 60 s and /healthz 15 s).
Now they run in the analysis lane (service/lanes.py): beyond its running + waiting places a request is answered
429 ComputeQueueFull with Retry-After at once, while answers already computed or stored, and every other route,
are served as before. A computation is held by a hook (every wait bounded), so the lane is full for sure; no
timing is measured here (make bench measures the latency of an unrelated request under a flood)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fp8_policy.service import lanes
from fp8_policy.service.analysis import actions
from tests.service.hardening.test_attack_bounds import RUNS, ready_run

HOLD_SECONDS = 20


class Held:
    """`analyze` of the analysis actions, held until `release()` (at most HOLD_SECONDS); counts its calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        self.entered = threading.Event()
        self.gate = threading.Event()
        real = actions.analyze

        def held(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            self.entered.set()
            assert self.gate.wait(HOLD_SECONDS), "held computation was never released"
            return real(*args, **kwargs)

        monkeypatch.setattr(actions, "analyze", held)

    def release(self) -> None:
        self.gate.set()


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[Held]:
    hold = Held(monkeypatch)
    yield hold
    hold.release()


def in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(call()))
    thread.start()
    return thread, out


def wait_admitted(count: int) -> None:
    deadline = time.monotonic() + HOLD_SECONDS
    while lanes.ANALYSIS.admitted < count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert lanes.ANALYSIS.admitted == count


def test_a_full_analysis_lane_answers_429_and_everything_else_is_served(make_client, project: str, held: Held) -> None:
    client: TestClient = make_client(compute_running=1, compute_waiting=0)
    run_id = ready_run(client, project)["id"]
    stored = client.get(f"{RUNS}/{run_id}/recommendation")  # computed at ingest and stored: no lane
    assert stored.status_code == 200
    held.release()
    held.gate.clear()

    worker, answers = in_thread(
        lambda: client.post(f"{RUNS}/{run_id}/recommendation", json={"thresholds": {"critical": 3.0}})
    )
    try:
        assert held.entered.wait(HOLD_SECONDS)
        wait_admitted(1)
        refused = [
            client.get(f"{RUNS}/{run_id}/analysis", params={"critical": 3.5}),
            client.post(f"{RUNS}/{run_id}/recommendation", json={"thresholds": {"critical": 3.6}}),
            client.get(f"{RUNS}/{run_id}/recommendation", params={"critical": 3.7}),
            client.get("/api/v1/compare", params={"base": run_id, "head": run_id}),
        ]
        for answer in refused:
            assert answer.status_code == 429, answer.text
            assert answer.json()["error"] == "ComputeQueueFull" and answer.headers["retry-after"] == "5"
        served = [
            client.get("/healthz"),
            client.get(RUNS, params={"project": project}),
            client.get(f"{RUNS}/{run_id}/analysis"),  # the stored analysis
            client.get(f"{RUNS}/{run_id}/recommendation"),  # the stored answer, cached
            client.get(f"{RUNS}/{run_id}/layers"),
        ]
        assert [a.status_code for a in served] == [200] * len(served)
    finally:
        held.release()
        worker.join(HOLD_SECONDS)
    assert answers[0].status_code == 200, answers[0].text
    assert lanes.ANALYSIS.admitted == 0


def test_identical_requests_wait_for_one_computation_inside_the_lane(make_client, project: str, held: Held) -> None:
    """A request waiting for the same computation holds a lane place too (it holds a request thread): with 1
    running + 1 waiting place, the identical second request waits, a third distinct one is 429; one computation."""
    client: TestClient = make_client(compute_running=1, compute_waiting=1)
    run_id = ready_run(client, project)["id"]
    held.release()
    held.gate.clear()
    held.calls = 0

    def ask() -> Any:
        return client.post(f"{RUNS}/{run_id}/recommendation", json={"thresholds": {"critical": 3.25}})

    first, first_answer = in_thread(ask)
    try:
        assert held.entered.wait(HOLD_SECONDS)
        wait_admitted(1)
        second, second_answer = in_thread(ask)
        wait_admitted(2)
        third = client.post(f"{RUNS}/{run_id}/recommendation", json={"thresholds": {"critical": 3.75}})
        assert third.status_code == 429, third.text
    finally:
        held.release()
        first.join(HOLD_SECONDS)
        second.join(HOLD_SECONDS)
    assert first_answer[0].status_code == second_answer[0].status_code == 200
    assert first_answer[0].json() == second_answer[0].json()
    assert held.calls == 1
