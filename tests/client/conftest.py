"""Fixtures of the client tests: a `PolicyClient` over `httpx.MockTransport`, and a fake clock for `wait`."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest

import fp8_policy.client.client as client_module
from fp8_policy.client import PolicyClient

Handler = Callable[[httpx.Request], httpx.Response]
BASE = "http://fp8.test"


@pytest.fixture
def mock_client() -> Iterator[Callable[[Handler], PolicyClient]]:
    """`mock_client(handler)`: a PolicyClient whose every request goes to `handler`; closed after the test."""
    made: list[PolicyClient] = []

    def factory(handler: Handler, **kwargs: object) -> PolicyClient:
        made.append(PolicyClient(BASE, transport=httpx.MockTransport(handler), **kwargs))
        return made[-1]

    yield factory
    for policy_client in made:
        policy_client.close()


class FakeClock:
    """Replaces `wait`'s clock and sleep: sleeping advances the clock and records the delay."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(client_module, "_clock", fake.monotonic)
    monkeypatch.setattr(client_module, "_sleep", fake.sleep)
    return fake
