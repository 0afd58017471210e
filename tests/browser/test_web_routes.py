"""The dashboard's own routes, without a browser: index and assets are served, nothing else is, nothing is remote."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from fp8_policy.service.web.routes import STATIC_DIR


@pytest.fixture(scope="module")
def web_client(tmp_path_factory) -> TestClient:
    from fp8_policy.db.migrate import upgrade
    from fp8_policy.service.app import create_app
    from fp8_policy.service.settings import Settings

    root = tmp_path_factory.mktemp("web-routes")
    url = f"sqlite+pysqlite:///{root / 'app.db'}"
    upgrade(url)
    with TestClient(create_app(Settings(_env_file=None, data_dir=root / "data", database_url=url))) as client:
        yield client


def test_index_is_the_single_page_app(web_client):
    response = web_client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["cache-control"] == "no-cache"
    assert '<script type="module" src="/static/app.js"></script>' in response.text
    assert '<link rel="stylesheet" href="/static/app.css">' in response.text


MODULES = sorted(path.name for path in STATIC_DIR.glob("*.js"))  # app.js (the entry) and the ES modules it imports


@pytest.mark.parametrize(
    ("name", "media_type"),
    [*((name, "text/javascript") for name in MODULES), ("app.css", "text/css"), ("favicon.svg", "image/svg+xml")],
)
def test_assets_are_served_with_their_media_type(web_client, name, media_type):
    response = web_client.get(f"/static/{name}")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(media_type)
    assert response.content == (STATIC_DIR / name).read_bytes()


def test_modules_import_only_sibling_files():
    """Every `import ... from "./x.js"` names a file served from static/ (flat: the routes serve no subfolders)."""
    assert "app.js" in MODULES
    for name in MODULES:
        text = (STATIC_DIR / name).read_text(encoding="utf-8")
        assert text.startswith("// "), f"{name} should open with a one-line comment saying what belongs there"
        for spec in re.findall(r"^import\s[^;]*?from\s+\"([^\"]+)\";", text, flags=re.M):
            assert re.fullmatch(r"\./[\w-]+\.js", spec), f"{name} imports {spec!r}: only ./<sibling>.js"
            assert spec[2:] in MODULES, f"{name} imports {spec!r}, which is not in static/"


@pytest.mark.parametrize(
    "path", ["/static/nope.js", "/static/..%2Froutes.py", "/static/%2e%2e/routes.py", "/static/../routes.py"]
)
def test_only_listed_assets_are_served(web_client, path):
    response = web_client.get(path)
    assert response.status_code == 404
    assert response.json()["error"] == "NotFound"


def test_the_api_keeps_its_json_errors(web_client):
    response = web_client.get("/api/v1/runs/424242")
    assert response.status_code == 404
    assert response.json() == {"error": "NotFound", "detail": "run 424242 does not exist"}


def test_no_asset_points_outside_the_app():
    """Works offline: no CDN, font service or other absolute URL in what the browser loads."""
    for path in STATIC_DIR.iterdir():
        text = path.read_text(encoding="utf-8")
        remote = [
            url
            for url in re.findall(r"(?:https?:)?//[\w.-]+\.[a-z]{2,}[^\s\"'`)]*", text)
            if "www.w3.org/2000/svg" not in url
        ]
        assert not remote, f"{path.name} refers to {remote}"
