"""/docs without a browser: the page and every asset it names are served by the app itself, and none of them
names another host or carries an inline script (the HTML pages' Content-Security-Policy allows neither).
tests/browser/test_api_docs.py loads the same page in Chromium and fails on any request that leaves the app."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser

import pytest
from fastapi.testclient import TestClient

from fp8_policy.service.docs.routes import _ASSETS, ASSET_PREFIX, OWN_DIR

EXTERNAL = re.compile(r"(?:https?:)?//[a-z0-9.-]+", re.IGNORECASE)


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.inline_scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]
        self.urls += [value for name, value in attrs if name.startswith("data-") and value and "/" in value]
        self._in_script = tag == "script"
        if tag == "script" and not values.get("src"):
            self.inline_scripts.append("<script> without src")

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline_scripts.append(data.strip()[:80])

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The app on SQLite only: nothing here touches the database beyond start-up."""
    from fp8_policy.db.migrate import upgrade
    from fp8_policy.service.app import create_app
    from fp8_policy.service.settings import Settings

    root = tmp_path_factory.mktemp("docs-page")
    url = f"sqlite+pysqlite:///{root / 'app.db'}"
    upgrade(url)
    with TestClient(create_app(Settings(_env_file=None, data_dir=root / "data", database_url=url))) as test_client:
        yield test_client


@pytest.fixture
def page(client: TestClient) -> tuple[TestClient, _Page, str]:
    response = client.get("/docs")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    parser = _Page()
    parser.feed(response.text)
    return client, parser, response.text


def test_docs_page_names_no_other_host_and_has_no_inline_script(page) -> None:
    _client, parser, text = page
    external = EXTERNAL.findall(text)
    assert not external, f"/docs names other hosts {external}: serve the asset from service/docs instead"
    assert not parser.inline_scripts, (
        f"/docs has inline script {parser.inline_scripts}: the Content-Security-"
        "Policy refuses it; put it in service/docs/static/ and load it with src="
    )
    assert all(url.startswith("/") and not url.startswith("//") for url in parser.urls), parser.urls


def test_every_asset_the_page_names_is_served_locally(page) -> None:
    client, parser, _text = page
    assets = [url for url in parser.urls if url.startswith(ASSET_PREFIX)]
    assert {url.rsplit("/", 1)[1] for url in assets} >= {"swagger-ui-bundle.js", "swagger-ui.css", "swagger-init.js"}
    for url in parser.urls:
        response = client.get(url)
        assert response.status_code == 200, f"{url} -> {response.status_code}"
    assert client.get("/openapi.json").json()["openapi"].startswith("3.")


def test_our_own_scripts_name_no_other_host_and_disable_the_online_validator() -> None:
    for path in OWN_DIR.iterdir():
        text = path.read_text(encoding="utf-8")
        assert not EXTERNAL.findall(text), f"{path.name} names another host: {EXTERNAL.findall(text)}"
    assert "validatorUrl: null" in (OWN_DIR / "swagger-init.js").read_text(encoding="utf-8"), (
        "Swagger UI's default validator badge calls validator.swagger.io: keep validatorUrl: null"
    )


def test_vendored_assets_exist_and_nothing_else_is_served(client: TestClient) -> None:
    assert all(path.is_file() for path in _ASSETS.values()), "fastapi-offline no longer ships an asset /docs uses"
    assert client.get(f"{ASSET_PREFIX}/..%2Fcore.py").status_code == 404
    assert client.get(f"{ASSET_PREFIX}/redoc.standalone.js").status_code == 404  # fetches cdn.redoc.ly: not served
    assert client.get("/redoc").status_code == 404
