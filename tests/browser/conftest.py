"""Browser tests: the real app under uvicorn on a free 127.0.0.1 port, driven by Debian's Chromium via Playwright.

Fixtures:
  live_server   the app (own SQLite database and data_dir, migrated first) served by uvicorn in a thread
  seeded_runs   ready runs uploaded through the API: {"healthy": id, "u_shape": id, "head_only": id}
  make_archive  make_archive(scenario) -> Path of a small synthetic fp8_log_dir .tar.gz

Helpers: logs_tar_gz (a tree's logs as a .tar.gz), upload_ready (an archive uploaded, once its run is ready),
wait_ready, box_of.
  page          a fresh Chromium page; uncaught JavaScript errors fail the test, and a failed test's report gets
                what the page showed then (#view's text, requests still waiting, the slowest ones, console
                warnings) and a screenshot, test-artifacts/browser/failed-<test>.png
  shot          shot(page_or_locator, "name") saves a screenshot to test-artifacts/browser/name.png

Chromium is not downloaded: `chromium` from Debian (or FP8_POLICY_CHROMIUM) is launched by Playwright's Python
package. Missing Chromium or Playwright fails the tests under CI=true and skips them (with the reason) otherwise.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tarfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from fp8_policy.db.migrate import upgrade
from fp8_policy.policy.synthetic import SCENARIOS, write_run
from fp8_policy.service.settings import Settings
from tests.support.uvicorn_app import plain_config, serving

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
VIEWPORT = {"width": 1440, "height": 1000}
SEEDED = {  # scenario -> (project, tags) of the runs every browser test can rely on, oldest first
    "healthy": ("bt-esm2", "synthetic,esm2,baseline"),
    "u_shape": ("bt-esm2", "synthetic,esm2"),
    "head_only": ("bt-llama", "synthetic,llama,head"),
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: drives the dashboard in a real headless Chromium (tests/browser)")


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _unavailable(reason: str) -> None:
    """Fail under CI (the browser suite must run there), skip with the reason elsewhere."""
    if _in_ci():
        pytest.fail(f"{reason} -- CI=true, so the browser tests fail instead of skipping", pytrace=False)
    pytest.skip(reason)


# ---------------------------------------------------------------------------------------------------- Chromium
@pytest.fixture(scope="session")
def chromium_executable() -> str:
    candidates = [
        os.environ.get("FP8_POLICY_CHROMIUM"),
        shutil.which("chromium"),
        shutil.which("chromium-browser"),
        "/usr/bin/chromium",
    ]
    path = next((c for c in candidates if c and Path(c).is_file() and os.access(c, os.X_OK)), None)
    if path is None:
        _unavailable("Chromium not found: `apt-get install -y chromium` (or set FP8_POLICY_CHROMIUM to its path)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _unavailable("Playwright's Python package is missing: `.venv/bin/pip install playwright`")
    return path


@pytest.fixture(scope="session")
def browser_context(chromium_executable: str, tmp_path_factory: pytest.TempPathFactory, live_server: LiveServer):
    from playwright.sync_api import expect, sync_playwright

    # `expect` assertions keep their own 5 s default, which set_default_timeout below does not change: on the
    # 2-core CI machine under the whole suite a compare request took longer ("Comparing…" still shown)
    expect.set_options(timeout=15_000)
    profile = tmp_path_factory.mktemp("chromium-profile")  # a fresh user-data dir per session
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=chromium_executable,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport=VIEWPORT,
            accept_downloads=True,
            locale="en-US",
            timezone_id="UTC",
        )
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
        context.set_default_timeout(15_000)
        try:
            yield context
        finally:
            context.close()


class PageLog:
    """What a page did, kept for the report of a test that fails with it: its requests (when each started and
    ended, how) and its console warnings and errors. A wait that times out then says whether the service was
    slow (a request still waiting), answered an error, or the page was stuck with every answer in."""

    SLOWEST = 8  # finished requests listed, slowest first
    VIEW_CHARS = 2_000  # of #view's text

    def __init__(self, page: Any) -> None:
        self.started = time.monotonic()
        self.waiting: dict[Any, float] = {}
        self.done: list[tuple[float, float, str, str]] = []  # (duration, started at, outcome, url)
        self.console: list[str] = []
        page.on("request", lambda request: self.waiting.setdefault(request, time.monotonic()))
        page.on("requestfinished", lambda request: self._end(request, self._status(request)))
        page.on("requestfailed", lambda request: self._end(request, f"failed: {request.failure}"))
        page.on("console", self._console)

    def _end(self, request: Any, outcome: str) -> None:
        began = self.waiting.pop(request, None)
        if began is not None:
            self.done.append((time.monotonic() - began, began - self.started, outcome, request.url))

    @staticmethod
    def _status(request: Any) -> str:
        response = request.response()  # a finished request's response has arrived: no wait
        return f"HTTP {response.status}" if response is not None else "no response"

    def _console(self, message: Any) -> None:
        if message.type in ("warning", "error"):
            self.console.append(f"{message.type}: {message.text}")

    def report(self, page: Any) -> str:
        """The page's state now: its URL, #view's text, the requests still waiting, the slowest, the console."""
        now = time.monotonic()
        try:
            view = page.evaluate("() => (document.querySelector('#view') || document.body).innerText", None)
        except Exception as exc:  # noqa: BLE001 - a closed or crashed page: say so instead of its text
            view = f"(not readable: {exc!r})"
        lines = [f"url: {page.url}", f"#view says: {view[: self.VIEW_CHARS]!r}"]
        lines.append(f"requests still waiting: {len(self.waiting)}")
        lines += [f"  {now - began:6.2f} s  {request.method} {request.url}" for request, began in self.waiting.items()]
        lines.append(f"slowest answered requests (of {len(self.done)}):")
        lines += [
            f"  {took:6.2f} s  from {at:6.2f} s  {outcome}  {url}"
            for took, at, outcome, url in sorted(self.done, reverse=True)[: self.SLOWEST]
        ]
        lines.append(f"console warnings and errors: {len(self.console)}")
        lines += [f"  {text[:500]}" for text in self.console[-10:]]
        return "\n".join(lines)


_PAGE_LOG = pytest.StashKey[tuple[Any, PageLog]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator:
    """A failed browser test's report holds what its page showed (PageLog) and a screenshot is saved of it."""
    report = yield
    if report.when == "call" and report.failed and _PAGE_LOG in item.stash:
        page, log = item.stash[_PAGE_LOG]
        text = log.report(page)
        try:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            path = ARTIFACTS / f"failed-{item.name[:100].replace('/', '_')}.png"
            page.screenshot(path=str(path), full_page=True, timeout=5_000)
            text += f"\nscreenshot: {path}"
        except Exception as exc:  # noqa: BLE001 - the report matters more than the picture
            text += f"\nno screenshot: {exc!r}"
        report.sections.append(("the page when the test failed", text))
    return report


@contextmanager
def checked_page(browser_context, on_request: Callable[[Any], None], item: pytest.Item | None = None) -> Iterator:
    """A new page that `on_request(request)` sees every request of; its uncaught JavaScript errors fail the test.
    Given the test's `item`, a failure's report says what the page showed then (`PageLog`)."""
    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("request", on_request)
    if item is not None:
        item.stash[_PAGE_LOG] = (page, PageLog(page))
    try:
        yield page
    finally:
        page.close()
        if item is not None:
            del item.stash[_PAGE_LOG]
    assert not errors, f"uncaught JavaScript errors: {errors}"


@pytest.fixture
def page(browser_context, live_server: LiveServer, request: pytest.FixtureRequest) -> Iterator:
    """A fresh page; uncaught JavaScript errors and any request that leaves the app (CDN, fonts) fail the test."""
    external: list[str] = []

    def note_external(request) -> None:
        if not request.url.startswith((live_server.url, "data:", "blob:", "about:")):
            external.append(request.url)

    with checked_page(browser_context, note_external, request.node) as page:
        yield page
    assert not external, f"the dashboard requested resources outside the app: {external}"


@pytest.fixture(scope="session")
def _artifacts_dir() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob("*.png"):
        old.unlink()
    return ARTIFACTS


@pytest.fixture
def shot(_artifacts_dir: Path) -> Callable[..., Path]:
    def take(target, name: str) -> Path:
        """A page (full-page screenshot) or a locator (that element only)."""
        path = _artifacts_dir / f"{name}.png"
        if hasattr(target, "goto"):
            target.evaluate("window.scrollTo(0, 0)")  # else the sticky top bar lands mid-page in the capture
            target.screenshot(path=str(path), full_page=True)
        else:
            target.screenshot(path=str(path))
        return path

    return take


# ---------------------------------------------------------------------------------------------------- the app
@dataclass(frozen=True)
class LiveServer:
    url: str
    settings: Settings

    def api(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30.0)


@pytest.fixture(scope="session")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    root = tmp_path_factory.mktemp("browser-app")
    database_url = f"sqlite+pysqlite:///{root / 'app.db'}"
    upgrade(database_url)
    # webhook_allow_private: the live-run test's webhook receiver listens on 127.0.0.1 (tests/support/webhook.py)
    settings = Settings(_env_file=None, data_dir=root / "data", database_url=database_url, webhook_allow_private=True)
    with serving(plain_config(settings), name="browser-uvicorn") as port:
        yield LiveServer(f"http://127.0.0.1:{port}", settings)


@pytest.fixture(scope="session")
def _archive_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("archives")


@pytest.fixture(scope="session")
def make_archive(_archive_dir: Path) -> Callable[[str], Path]:
    """make_archive("head_only") -> a .tar.gz of that synthetic scenario, cut to 200 iterations."""

    def build(scenario: str) -> Path:
        archive = _archive_dir / f"{scenario}.tar.gz"
        if archive.exists():
            return archive
        tree = _archive_dir / scenario
        write_run(dataclasses.replace(SCENARIOS[scenario].run, iterations=200), tree)
        return logs_tar_gz(tree, archive)

    return build


def logs_tar_gz(tree: Path, archive: Path) -> Path:
    """`archive` written: a .tar.gz of the *.log files under `tree` (member names relative to it)."""
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(tree.rglob("*.log")):
            tar.add(path, arcname=str(path.relative_to(tree)))
    return archive


def upload_ready(client: httpx.Client, archive: Path, **fields: str) -> dict:
    """POST `archive` (a .tar.gz) as a new run with the form `fields` (name, project, metadata, tags); the run's
    body once it is ready."""
    response = client.post(
        "/api/v1/runs", data=fields, files={"file": (archive.name, archive.read_bytes(), "application/gzip")}
    )
    assert response.status_code in (200, 202), response.text
    return wait_ready(client, response.json()["id"])


def wait_ready(client: httpx.Client, run_id: int, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        body = client.get(f"/api/v1/runs/{run_id}").json()
        if body["status"] in ("ready", "failed"):
            assert body["status"] == "ready", body
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} still {body['status']} after {timeout} s")
        time.sleep(0.1)


def box_of(locator: Any, timeout: float = 10.0) -> dict[str, float]:
    """The bounding box of the element `locator` names, asked again while the page replaces that element.

    A live page redraws a chart when a poll brings more data, when the heatmap reports its series, or when a
    scroll bar appears and the card's width changes; Playwright's bounding_box() answers None for an element
    detached in between. Asked again, the box is the new element's (same layout, same place)."""
    deadline = time.monotonic() + timeout
    while True:
        box = locator.bounding_box(timeout=timeout * 1000)
        if box is not None:
            return box
        if time.monotonic() > deadline:
            raise AssertionError(f"{locator} has no bounding box after {timeout} s (detached or hidden)")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def seeded_runs(live_server: LiveServer, make_archive: Callable[[str], Path]) -> dict[str, int]:
    """Ready runs uploaded through the API: two ESM2 runs (healthy, u_shape) and a Llama one (head_only)."""
    ids: dict[str, int] = {}
    with live_server.api() as client:
        for scenario in SEEDED:
            project, tags = SEEDED[scenario]
            archive = make_archive(scenario)
            response = client.post(
                "/api/v1/runs",
                data={"name": f"seed-{scenario}", "project": project, "tags": tags},
                files={"file": (archive.name, archive.read_bytes(), "application/gzip")},
            )
            assert response.status_code in (200, 202), response.text
            ids[scenario] = response.json()["id"]
        for run_id in ids.values():
            wait_ready(client, run_id)
    return ids
