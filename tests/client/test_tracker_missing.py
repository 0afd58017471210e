"""`upload --mlflow-run-id` / `--wandb-run` without the tracker's package: a clear TrackerMissing naming the extra,
before anything is kept with the run or linked to it (client/trackers.py imports the tracker first)."""

from __future__ import annotations

import sys

import httpx
import pytest

from fp8_policy.client import trackers


@pytest.mark.parametrize(("missing", "kwargs"), [("wandb", {"wandb_run": "a/b/c"}), ("mlflow", {"mlflow_run_id": "r"})])
def test_a_missing_tracker_package_is_said_before_any_request(mock_client, monkeypatch, missing, kwargs) -> None:
    requests: list[httpx.Request] = []

    def service(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(500)

    for name in [m for m in sys.modules if m == missing or m.startswith(f"{missing}.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, missing, None)  # `import missing` raises ImportError

    with pytest.raises(trackers.TrackerError) as raised:
        trackers.hand_off(mock_client(service), 7, **kwargs)

    assert raised.value.error == "TrackerMissing" and f"fp8-policy[{missing}]" in raised.value.detail
    assert requests == []
