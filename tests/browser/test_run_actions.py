"""The run page's Retry and Delete buttons in a real headless Chromium (the open service's anonymous user is an
admin; a read-only token sees neither: tests/browser/test_sign_in.py). Screenshots: test-artifacts/browser/actions-*."""

from __future__ import annotations

import httpx
import pytest

from tests.browser.conftest import LiveServer, wait_ready
from tests.support.archives import TS, stats_log

try:
    from playwright.sync_api import expect
except ImportError:  # the chromium_executable fixture reports it
    expect = None

pytestmark = pytest.mark.browser


def upload_log(client: httpx.Client, data: bytes, name: str) -> dict:
    response = client.post(
        "/api/v1/runs",
        data={"name": name, "project": "bt-actions"},
        files={"file": (f"{name}.log", data, "text/plain")},
    )
    assert response.status_code == 202, response.text
    return settled(client, response.json()["id"])


def settled(client: httpx.Client, run_id: int) -> dict:
    """The run once ready or failed (wait_ready raises on a failed run)."""
    try:
        return wait_ready(client, run_id)
    except AssertionError:
        return client.get(f"/api/v1/runs/{run_id}").json()


def test_a_failed_run_is_retried_from_its_page(page, live_server: LiveServer, shot) -> None:
    with live_server.api() as client:
        run = upload_log(client, f"{TS} - INFO - not a statistics line\n".encode(), "retry-me")
    assert run["status"] == "failed"
    page.goto(f"{live_server.url}/#/runs/{run['id']}")
    retry = page.locator("#run-retry")
    expect(retry).to_be_visible()
    shot(page, "actions-01-failed-run-with-retry")

    with page.expect_response(lambda r: r.url.endswith(f"/runs/{run['id']}/retry")) as answer:
        retry.click()

    assert answer.value.status == 202
    expect(page.locator("#toast")).to_contain_text("queued again")
    expect(page.locator("#view .alert-error")).to_contain_text("NoStatsLines", timeout=30_000)  # failed again


def test_a_run_is_deleted_from_its_page_after_a_confirmation(page, live_server: LiveServer, shot) -> None:
    with live_server.api() as client:
        run = upload_log(client, stats_log([("model.layers.1.fc1_gradient_underflows%", 0, 0.5)]), "delete-me")
    assert run["status"] == "ready"
    page.goto(f"{live_server.url}/#/runs/{run['id']}")
    delete = page.locator("#run-delete")
    expect(delete).to_be_visible()
    retry_shown = page.locator("#run-retry").count()

    delete.click()
    expect(delete).to_have_text("Confirm delete")
    shot(page.locator(".page-head"), "actions-02-confirm-delete")
    delete.click()

    expect(page).to_have_url(f"{live_server.url}/#/runs")
    with live_server.api() as client:
        assert client.get(f"/api/v1/runs/{run['id']}").status_code == 404
    assert retry_shown == 0  # a ready run has nothing to retry
