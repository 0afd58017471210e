"""`PolicyClient.wait`: exponential backoff, ready, failed (IngestFailed) and the overall timeout (WaitTimeout)."""

from __future__ import annotations

from itertools import islice

import httpx
import pytest

from fp8_policy.client import IngestFailed, WaitTimeout, backoff_delays
from tests.client.fakes import run_body


def _statuses(*statuses: str, error: str | None = None):
    """A handler answering GET /runs/7 with the given statuses in turn (the last one repeats)."""
    answers = list(statuses)

    def handler(request: httpx.Request) -> httpx.Response:
        status = answers.pop(0) if len(answers) > 1 else answers[0]
        return httpx.Response(200, json=run_body(7, status, error=error if status == "failed" else None))

    return handler


def test_backoff_doubles_from_200ms_up_to_2s() -> None:
    assert list(islice(backoff_delays(), 7)) == [0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0]


def test_wait_polls_with_backoff_until_ready(mock_client, clock) -> None:
    client = mock_client(_statuses("queued", "processing", "processing", "processing", "ready"))

    run = client.wait(7)

    assert run["status"] == "ready"
    assert clock.sleeps == [0.2, 0.4, 0.8, 1.6]


def test_wait_returns_at_once_for_a_ready_run(mock_client, clock) -> None:
    assert mock_client(_statuses("ready")).wait(7)["id"] == 7
    assert clock.sleeps == []


def test_failed_ingest_raises_with_the_servers_error(mock_client, clock) -> None:
    client = mock_client(_statuses("queued", "failed", error="InvalidArchive: not a gzip file"))

    with pytest.raises(IngestFailed) as caught:
        client.wait(7)

    assert caught.value.server_error == "InvalidArchive: not a gzip file"
    assert caught.value.error == "IngestFailed"
    assert caught.value.detail == "run 7 failed: InvalidArchive: not a gzip file"
    assert caught.value.run["status"] == "failed"


def test_wait_gives_up_after_the_timeout(mock_client, clock) -> None:
    client = mock_client(_statuses("processing"))

    with pytest.raises(WaitTimeout) as caught:
        client.wait(7, timeout=5.0)

    assert (caught.value.run_id, caught.value.status, caught.value.timeout) == (7, "processing", 5.0)
    assert caught.value.detail == "run 7 is still processing after 5 s"
    assert sum(clock.sleeps) == pytest.approx(5.0)  # the last sleep is cut to the deadline
    assert clock.sleeps[:5] == [0.2, 0.4, 0.8, 1.6, 2.0]
