"""The run page's Notes and tags card in a real headless Chromium (the open service's anonymous user may edit;
a read-only token sees no Edit button: tests/browser/test_sign_in.py): notes and a tag are edited, saved through
PATCH /api/v1/runs/{id}, shown on the page and stored; a refused edit shows the service's reason and stores
nothing. Screenshots: test-artifacts/browser/notes-*."""

from __future__ import annotations

import pytest

from tests.browser.conftest import LiveServer, wait_ready
from tests.support.archives import stats_log

try:
    from playwright.sync_api import expect
except ImportError:  # the chromium_executable fixture reports it
    expect = None

pytestmark = pytest.mark.browser
NOTES = "Baseline for the FP8 sweep.\nlr 3e-4 on 2 nodes"


def ready_run(live_server: LiveServer, name: str, marker: float) -> int:
    data = stats_log([("model.layers.1.fc1_gradient_underflows%", it, marker + it / 100) for it in (0, 10, 20)])
    with live_server.api() as client:
        response = client.post(
            "/api/v1/runs",
            data={"name": name, "project": "bt-notes", "tags": "nightly"},
            files={"file": (f"{name}.log", data, "text/plain")},
        )
        assert response.status_code == 202, response.text
        return wait_ready(client, response.json()["id"])["id"]


def test_notes_and_a_tag_are_edited_and_saved(page, live_server: LiveServer, shot) -> None:
    run_id = ready_run(live_server, "notes-me", 0.4321)
    page.goto(f"{live_server.url}/#/runs/{run_id}")
    expect(page.locator("#run-notes-text")).to_have_text("No notes yet.")

    page.locator("#run-notes-edit").click()
    page.fill("#run-notes-input", NOTES)
    page.fill("#run-tags-input", "nightly, fp8-sweep")
    shot(page.locator("#run-notes"), "notes-01-editing")
    with page.expect_response(lambda r: r.request.method == "PATCH" and r.url.endswith(f"/runs/{run_id}")) as answer:
        page.locator("#run-notes-save").click()

    assert answer.value.status == 200
    expect(page.locator("#toast")).to_contain_text("saved")
    expect(page.locator("#run-notes-text")).to_have_text(NOTES)
    expect(page.locator("#run-notes-tags .chip")).to_have_count(2)
    assert sorted(page.locator("#run-notes-tags .chip").all_text_contents()) == ["fp8-sweep", "nightly"]
    assert sorted(page.locator("#run-head-tags .chip").all_text_contents()) == ["fp8-sweep", "nightly"]  # header too
    expect(page.locator("#run-notes-edit")).to_be_visible()
    shot(page.locator("#run-notes"), "notes-02-saved")
    with live_server.api() as client:
        stored = client.get(f"/api/v1/runs/{run_id}").json()
    assert stored["notes"] == NOTES
    assert sorted(stored["tags"]) == ["fp8-sweep", "nightly"]

    page.goto(f"{live_server.url}/#/runs?q=baseline%20nodes")  # the runs list's search covers the notes
    expect(page.locator("tbody tr[data-run-id]")).to_have_count(1)
    expect(page.locator(f"tbody tr[data-run-id='{run_id}']")).to_be_visible()


def test_a_refused_edit_shows_why_and_stores_nothing(page, live_server: LiveServer, shot) -> None:
    run_id = ready_run(live_server, "notes-refused", 0.8765)
    page.goto(f"{live_server.url}/#/runs/{run_id}")
    page.locator("#run-notes-edit").click()
    page.fill("#run-notes-input", "kept out")
    page.fill("#run-tags-input", "x" * 101)

    page.locator("#run-notes-save").click()

    expect(page.locator("#run-notes-error")).to_contain_text("at most 50 tags of at most 100 characters")
    expect(page.locator("#run-notes-save")).to_be_enabled()
    shot(page.locator("#run-notes"), "notes-03-refused")
    with live_server.api() as client:
        stored = client.get(f"/api/v1/runs/{run_id}").json()
    assert (stored["notes"], stored["tags"]) == (None, ["nightly"])


def test_editing_only_the_notes_keeps_a_tag_with_a_comma_whole(page, live_server: LiveServer) -> None:
    """A tag set through the API may hold a comma (`"a,b"`): the field shows it as `a,b`, and saving only new
    notes sends no tags, so the tag is not split into `a` and `b`."""
    run_id = ready_run(live_server, "notes-comma", 0.2468)
    with live_server.api() as client:
        assert client.patch(f"/api/v1/runs/{run_id}", json={"tags": ["a,b", "c"]}).status_code == 200
    page.goto(f"{live_server.url}/#/runs/{run_id}")
    page.locator("#run-notes-edit").click()
    page.fill("#run-notes-input", "only the notes")
    with page.expect_request(lambda r: r.method == "PATCH" and r.url.endswith(f"/runs/{run_id}")) as sent:
        page.locator("#run-notes-save").click()

    assert sent.value.post_data_json == {"notes": "only the notes"}
    expect(page.locator("#toast")).to_contain_text("saved")
    with live_server.api() as client:
        stored = client.get(f"/api/v1/runs/{run_id}").json()
    assert (stored["notes"], sorted(stored["tags"])) == ("only the notes", ["a,b", "c"])
