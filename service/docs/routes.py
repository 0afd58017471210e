"""`/docs` (Swagger UI) with every asset served by this app, so the page works on a cluster with no internet access.

The Swagger UI bundle comes from the `fastapi-offline` package (it vendors swagger-ui-dist 5 as package data;
https://github.com/turettn/fastapi_offline); only its `static/` files are used, not its app factory. Swagger UI is
started by `static/swagger-init.js`, a file rather than an inline script, because the HTML pages'
Content-Security-Policy allows scripts from this origin only; the OpenAPI document's URL reaches that script through
a `data-` attribute. The asset list is fixed at import time: a request can only name one of those files, never a path.

There is no `/redoc`: ReDoc's standalone build fetches its logo from cdn.redoc.ly, which an offline page must not do
(tests/browser/test_api_docs.py would catch it).
"""

from __future__ import annotations

import html
from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse

from fp8_policy.service.errors import NotFound

ASSET_PREFIX = "/docs/assets"
VENDOR_DIR = Path(str(files("fastapi_offline").joinpath("static")))
OWN_DIR = Path(__file__).resolve().parent / "static"
_MEDIA_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".png": "image/png"}
_VENDOR_FILES = ("swagger-ui-bundle.js", "swagger-ui.css", "favicon.png")
_ASSETS = {
    **{name: VENDOR_DIR / name for name in _VENDOR_FILES},
    **{path.name: path for path in OWN_DIR.iterdir() if path.suffix in _MEDIA_TYPES},
}
# Revalidate on every load (ETag): a package upgrade is picked up at once.
_HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}

router = APIRouter(tags=["docs"], include_in_schema=False)


def _page(request: Request, title: str, head: str, body: str) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return HTMLResponse(
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n"
        f'<link rel="icon" href="{html.escape(root)}{ASSET_PREFIX}/favicon.png">\n{head}</head>\n'
        f"<body>\n{body}</body>\n</html>\n",
        headers={"Cache-Control": "no-cache"},
    )


def _openapi_url(request: Request) -> str:
    return f"{request.scope.get('root_path', '')}{request.app.openapi_url}"


@router.get("/docs")
def swagger_ui(request: Request) -> HTMLResponse:
    """Swagger UI over the app's OpenAPI document."""
    assets = html.escape(f"{request.scope.get('root_path', '')}{ASSET_PREFIX}")
    return _page(
        request,
        f"{request.app.title} — API",
        f'<link rel="stylesheet" href="{assets}/swagger-ui.css">\n',
        f'<div id="swagger-ui" data-openapi-url="{html.escape(_openapi_url(request))}"></div>\n'
        f'<script src="{assets}/swagger-ui-bundle.js"></script>\n'
        f'<script src="{assets}/swagger-init.js"></script>\n',
    )


@router.get(ASSET_PREFIX + "/{name}")
def asset(name: str) -> FileResponse:
    path = _ASSETS.get(name)
    if path is None:
        raise NotFound(f"no documentation asset {name!r}")
    return FileResponse(path, media_type=_MEDIA_TYPES[path.suffix], headers=_HEADERS)
