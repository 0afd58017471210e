"""Dashboard sign-in in a real headless Chromium against a service that has access tokens (its own database, so
the other browser tests keep their open service): the 401 opens the sign-in dialog, a wrong token is refused
in the dialog, the right one is kept in sessionStorage (never in the URL) and sent as a Bearer header on every
API call and image, the top bar names the token, and signing out forgets it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from fp8_policy.db.migrate import upgrade
from fp8_policy.service.settings import Settings
from tests.browser.conftest import checked_page, wait_ready
from tests.support.authutil import bearer, make_token
from tests.support.uvicorn_app import live_service

try:
    from playwright.sync_api import expect
except ImportError:  # the chromium_executable fixture reports it
    expect = None

pytestmark = pytest.mark.browser
STORAGE_KEY = "fp8-policy.token"


@dataclass(frozen=True)
class Locked:
    url: str
    reader: str  # the read token's name
    read_token: str
    run_id: int


@pytest.fixture(scope="module")
def locked_server(tmp_path_factory: pytest.TempPathFactory, make_archive: Callable[[str], Path]) -> Iterator[Locked]:
    root = tmp_path_factory.mktemp("signin-app")
    url = f"sqlite+pysqlite:///{root / 'app.db'}"
    upgrade(url)
    _uploader, upload_token = make_token(url, "upload", name="ci-uploader")
    reader, read_token = make_token(url, "read", name="alice")
    settings = Settings(_env_file=None, data_dir=root / "data", database_url=url)
    with (
        live_service(settings) as live,
        httpx.Client(base_url=live.url, timeout=30, headers=bearer(upload_token)) as api,
    ):
        archive = make_archive("u_shape")
        response = api.post(
            "/api/v1/runs",
            data={"name": "signed-upload", "project": "bt-auth"},
            files={"file": (archive.name, archive.read_bytes(), "application/gzip")},
        )
        assert response.status_code == 202, response.text
        run_id = response.json()["id"]
        wait_ready(api, run_id)
        yield Locked(live.url, reader, read_token, run_id)


@pytest.fixture
def locked_page(browser_context, locked_server: Locked, request: pytest.FixtureRequest) -> Iterator:
    """A page on the locked service; uncaught JavaScript errors fail the test; records API request headers."""
    headers: list[tuple[str, str | None]] = []

    def record(sent) -> None:
        if "/api/v1/" in sent.url:
            headers.append((sent.url, sent.headers.get("authorization")))

    with checked_page(browser_context, record, request.node) as page:
        page.api_headers = headers
        yield page


def test_sign_in_with_a_token_then_sign_out(locked_page, locked_server: Locked, shot) -> None:
    page = locked_page
    page.goto(f"{locked_server.url}/#/runs")
    dialog = page.locator("#signin-dialog")
    expect(dialog).to_be_visible()
    expect(page.locator("#signin-reason")).to_contain_text("needs an access token")
    shot(page, "auth-01-sign-in-dialog")

    page.fill("#signin-token", "fp8p_00000000_" + "A" * 43)
    page.click("#signin-submit")
    expect(page.locator("#signin-error")).to_contain_text("not valid")
    assert page.evaluate(f"sessionStorage.getItem('{STORAGE_KEY}')") is None
    shot(page, "auth-02-wrong-token")

    page.fill("#signin-token", locked_server.read_token)
    signed_in_from = len(page.api_headers)
    page.click("#signin-submit")
    expect(page.locator("#signed-in-as")).to_contain_text(locked_server.reader)
    expect(page.locator("#signed-in-as")).to_contain_text("read")
    expect(dialog).to_be_hidden()
    expect(page.locator("a.run-link", has_text="signed-upload")).to_be_visible()
    assert page.evaluate(f"sessionStorage.getItem('{STORAGE_KEY}')") == locked_server.read_token
    assert page.evaluate(f"localStorage.getItem('{STORAGE_KEY}')") is None
    assert locked_server.read_token not in page.url
    shot(page, "auth-03-signed-in-runs")

    page.click("a.run-link")
    # The run page's heatmap is drawn from heatmap.json, fetched with the token like every API call.
    expect(page.locator(".heatmap-live")).to_have_attribute("aria-busy", "false", timeout=30_000)
    page.wait_for_function("() => { const c = document.querySelector('#heatmap-canvas'); return c && c.width > 0; }")
    expect(page.locator("#view")).to_contain_text("signed-upload")
    shot(page, "auth-04-signed-in-run-page")
    sent = [authorization for _url, authorization in page.api_headers[signed_in_from:]]
    assert len(sent) >= 4  # the check, then after the reload: who am I, the runs, the run, its heatmap...
    assert all(a == f"Bearer {locked_server.read_token}" for a in sent), page.api_headers[signed_in_from:]
    assert all(locked_server.read_token not in u for u, _a in page.api_headers)

    page.click("#sign-out")
    expect(dialog).to_be_visible()
    assert page.evaluate(f"sessionStorage.getItem('{STORAGE_KEY}')") is None


def test_the_metrics_csv_link_downloads_with_the_token(locked_page, locked_server: Locked) -> None:
    page = locked_page
    page.goto(f"{locked_server.url}/#/runs/{locked_server.run_id}")
    page.fill("#signin-token", locked_server.read_token)
    page.click("#signin-submit")
    expect(page.locator("#signed-in-as")).to_be_visible()
    with page.expect_download() as download_info:
        page.get_by_role("link", name="Metrics CSV").click()
    path = download_info.value.path()
    assert Path(path).read_text().splitlines()[0].startswith("rank,")


def test_behind_the_sign_in_dialog_the_page_asks_for_a_token_and_says_nothing_broke(
    locked_page, locked_server: Locked, shot
) -> None:
    page = locked_page
    page.goto(f"{locked_server.url}/#/runs/{locked_server.run_id}")
    expect(page.locator("#signin-dialog")).to_be_visible()

    expect(page.locator("#view h1")).to_have_text("Sign in to see this page")
    expect(page.locator("#view")).not_to_contain_text("Something went wrong")
    shot(page, "auth-05-sign-in-needed-behind-the-dialog")

    page.keyboard.press("Escape")  # closed without a token: the page still says what to do
    expect(page.locator("#signin-dialog")).to_be_hidden()
    page.click("#signin-needed button")
    expect(page.locator("#signin-dialog")).to_be_visible()
    page.fill("#signin-token", locked_server.read_token)
    page.click("#signin-submit")
    expect(page.locator("#view h1")).to_contain_text("signed-upload")


def open_the_run_with_the_read_token(page, locked_server: Locked):
    """The locked service's run page, signed in with the read-only token (kept in sessionStorage)."""
    page.goto(f"{locked_server.url}/#/runs")
    page.evaluate(f"sessionStorage.setItem('{STORAGE_KEY}', {locked_server.read_token!r})")
    page.goto(f"{locked_server.url}/#/runs/{locked_server.run_id}")
    page.reload()
    expect(page.locator("#signed-in-as")).to_contain_text("read")
    return page


def test_a_read_only_token_sees_no_retry_or_delete_button(locked_page, locked_server: Locked) -> None:
    page = open_the_run_with_the_read_token(locked_page, locked_server)
    expect(page.locator("#view h1")).to_contain_text("signed-upload")
    expect(page.locator("#run-actions")).to_be_attached()
    page.wait_for_load_state("networkidle")
    assert page.locator("#run-delete, #run-retry").count() == 0


def test_a_read_only_token_sees_the_notes_card_without_an_edit_button(locked_page, locked_server: Locked) -> None:
    page = open_the_run_with_the_read_token(locked_page, locked_server)
    expect(page.locator("#run-notes")).to_be_visible()
    expect(page.locator("#run-notes-text")).to_have_text("No notes yet.")
    page.wait_for_load_state("networkidle")
    assert page.locator("#run-notes-edit").count() == 0
