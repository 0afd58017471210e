"""/docs in a real Chromium: it renders the API from local assets only (the `page` fixture fails the
test on any request outside the app and on uncaught JavaScript errors), and nothing is refused by the page's
Content-Security-Policy (an inline script would be)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser


def _csp_refusals(page) -> list[str]:
    refusals: list[str] = []
    page.on(
        "console",
        lambda message: (
            refusals.append(message.text)
            if "Content Security Policy" in message.text or "Refused to" in message.text
            else None
        ),
    )
    return refusals


def test_swagger_ui_renders_every_operation_offline(page, live_server, shot) -> None:
    refusals = _csp_refusals(page)
    page.goto(f"{live_server.url}/docs")
    page.locator(".opblock").first.wait_for()
    spec = page.evaluate("fetch('/openapi.json').then(r => r.json())")
    operations = sum(len(methods) for methods in spec["paths"].values())
    assert page.locator(".opblock").count() == operations
    assert page.locator(".info .title").inner_text().startswith("fp8-policy")
    page.locator(".opblock-summary-path[data-path='/api/v1/runs/{run_id}/analysis']").first.click()
    page.locator(".opblock-body .responses-wrapper").first.wait_for()
    assert "InvalidThresholds" in page.content() or page.locator(".response-col_status").count() > 1
    shot(page, "api-docs-swagger")
    assert not refusals, f"the Content-Security-Policy refused: {refusals}"
