"""Serve the dashboard: `/` is the single-page app, `/static/<file>` its assets (no CDN, no build step).

The app routes by URL hash (`#/runs`, `#/runs/<id>`, `#/compare?runs=`, `#/upload`), so the server only ever
hands out index.html and the files in `static/`, and sends `/compare?runs=` on to `/#/compare?runs=`. The asset
list is fixed at import time: a request can only name one of those files, never a path.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, RedirectResponse

from fp8_policy.service.errors import NotFound

STATIC_DIR = Path(__file__).resolve().parent / "static"
_MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",  # colors.json, imported by colors.js as a JSON module
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
}
_ASSETS = {path.name: path for path in STATIC_DIR.iterdir() if path.is_file() and path.suffix in _MEDIA_TYPES}
# Revalidate on every load so a redeploy is picked up at once; the files are small and served with ETags.
_HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}

router = APIRouter(tags=["dashboard"], include_in_schema=False)


def _file(name: str) -> FileResponse:
    path = _ASSETS.get(name)
    if path is None:
        raise NotFound(f"no dashboard asset {name!r}")
    return FileResponse(path, media_type=_MEDIA_TYPES[path.suffix], headers=_HEADERS)


@router.get("/")
def index() -> FileResponse:
    """The dashboard (runs list, run page, compare, upload)."""
    return _file("index.html")


@router.get("/compare")
def compare_page(request: Request) -> RedirectResponse:
    """`/compare?runs=3,5,9` (or the two-run `?base=&head=`): a link to the dashboard's compare view that needs no
    `#`; it answers with the view's address, `/#/compare?runs=3,5,9`. Other parameters are dropped."""
    kept = [(key, value) for key, value in request.query_params.multi_items() if key in ("runs", "base", "head")]
    query = urlencode(kept, safe=",", quote_via=quote)
    return RedirectResponse("/#/compare" + (f"?{query}" if query else ""), status_code=307)


@router.get("/static/{name}")
def asset(name: str) -> FileResponse:
    return _file(name)


@router.get("/favicon.ico")
def favicon() -> FileResponse:
    return _file("favicon.svg")
