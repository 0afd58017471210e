"""The dashboard under its Content-Security-Policy, and a real cross-site attack, in Chromium (issue 9 item 11).

* Every dashboard view (runs list, run page with heatmap and tabs, compare, upload) works with nothing refused by
  the CSP (no inline script or style, images from this origin or blob:/data: only).
* A page served from another origin (another port on loopback) that posts an upload with a no-cors fetch — the
  attack that once stored a run which broke the runs list — stores nothing: the service answers 403.
"""

from __future__ import annotations

import http.server
import time
import uuid
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from tests.browser.test_api_docs import _csp_refusals
from tests.browser.test_dashboard import wait_heatmap, wait_image
from tests.support.local_http import serving

pytestmark = pytest.mark.browser


def test_every_dashboard_view_works_under_the_csp(page, live_server, seeded_runs, shot) -> None:
    refusals = _csp_refusals(page)
    run_id = seeded_runs["head_only"]

    page.goto(f"{live_server.url}/#/runs")
    expect(page.locator("body")).to_contain_text("seed-head_only")
    page.goto(f"{live_server.url}/#/runs/{run_id}")
    wait_heatmap(page)  # drawn on its canvas from heatmap.json
    expect(page.locator("#rec-code")).not_to_be_empty()  # the recommendation's tabs and text
    # two ESM-2 runs: the pair detail's server-rendered image, shown as a blob: URL
    page.goto(f"{live_server.url}/#/compare?base={seeded_runs['healthy']}&head={seeded_runs['u_shape']}")
    expect(page.locator("#compare-result")).to_be_visible()
    wait_image(page, "#compare-img")
    page.goto(f"{live_server.url}/#/upload")
    page.locator("input[type=file]").first.wait_for(state="attached")
    shot(page, "csp-upload-view")

    assert not refusals, f"the Content-Security-Policy refused: {refusals}"


@pytest.fixture
def attacker_origin(live_server) -> Iterator[str]:
    """Another origin on loopback (another port) serving a page that posts to the service with a no-cors fetch."""
    project = f"attack-{uuid.uuid4().hex}"
    page_html = f"""<!doctype html><html><body><script>
      const form = new FormData();
      form.append("project", "{project}");
      form.append("metadata", '{{"a": "x"}}');
      form.append("file", new Blob(["2026-01-15 23:06:41,584 - INFO - model.layers.1.fc1_activation_underflows%"
        + " \\t\\t\\t\\t iteration=000000 \\t\\t\\t\\t value=1.0000\\n"], {{type: "text/plain"}}), "run.log");
      fetch("{live_server.url}/api/v1/runs", {{method: "POST", mode: "no-cors", body: form}})
        .then(() => document.title = "sent", () => document.title = "sent");
    </script></body></html>""".encode()

    class Attacker(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page_html)))
            self.end_headers()
            self.wfile.write(page_html)

        def log_message(self, *args) -> None:
            pass

    with serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), Attacker)) as port:
        yield f"http://127.0.0.1:{port}|{project}"


def test_a_page_on_another_origin_cannot_upload(browser_context, live_server, attacker_origin) -> None:
    url, project = attacker_origin.split("|")
    page = browser_context.new_page()  # not the `page` fixture: this page is deliberately not the app's
    answers: list[int] = []
    page.on(
        "response",
        lambda response: (
            answers.append(response.status) if response.url.startswith(f"{live_server.url}/api/v1/runs") else None
        ),
    )

    page.goto(url)
    expect(page).to_have_title("sent")
    deadline = time.monotonic() + 10
    while not answers and time.monotonic() < deadline:
        page.wait_for_timeout(50)

    page.close()
    assert answers == [403]
    with live_server.api() as client:
        assert client.get("/api/v1/runs", params={"project": project}).json()["items"] == []
