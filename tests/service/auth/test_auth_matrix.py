"""Every /api/ route × every kind of caller, on SQLite and PostgreSQL: the routes are ENUMERATED from the app,
so a route added later is checked too, and this module fails for an /api/ route that declares no scope.

Rules checked: no token / unknown / malformed / revoked / expired token -> 401 with `WWW-Authenticate: Bearer`;
a valid token below the route's scope -> 403; at or above it -> anything but 401/403; both errors in the
`{"error", "detail"}` shape. Requests name runs and tokens that do not exist, so nothing is changed.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from fp8_policy.service.app import create_app
from fp8_policy.service.auth.deps import ScopeCheck
from fp8_policy.service.auth.tokens import SCOPES, scope_allows
from fp8_policy.service.settings import Settings
from tests.support.authutil import BACKENDS, bearer, in_the_past, make_token, private_database, set_token_dates

# Routes whose scope is not the default of their method (GET: read; a write must not be read, see below).
EXPECTED_SCOPES = {
    ("POST", "/api/v1/runs"): "upload",
    ("POST", "/api/v1/runs/{run_id}/retry"): "upload",
    ("POST", "/api/v1/runs/{run_id}/experiments"): "upload",
    ("PATCH", "/api/v1/runs/{run_id}"): "upload",
    ("DELETE", "/api/v1/runs/{run_id}"): "admin",
    ("POST", "/api/v1/runs/{run_id}/recommendation"): "read",  # a recompute from stored data; stores nothing
    ("GET", "/api/v1/tokens"): "admin",
    ("POST", "/api/v1/tokens"): "admin",
    ("DELETE", "/api/v1/tokens/{name}"): "admin",
    ("GET", "/api/v1/alerts/rules"): "admin",  # webhook URLs carry secrets (a Slack hook is its own credential)
    ("POST", "/api/v1/alerts/rules"): "admin",
    ("DELETE", "/api/v1/alerts/rules/{rule_id}"): "admin",
    ("POST", "/api/v1/live/runs"): "upload",
    ("PUT", "/api/v1/live/runs/{run_id}/files/{path:path}"): "upload",
    ("POST", "/api/v1/live/runs/{run_id}/finalize"): "upload",
}
# Writes that only need `read`, decided one by one (everything else that is not a GET needs upload or admin).
READ_ONLY_WRITES = {("POST", "/api/v1/runs/{run_id}/recommendation")}
OPEN_PATHS = ["/", "/static/app.js", "/static/app.css", "/favicon.ico", "/healthz", "/docs", "/openapi.json"]


@dataclass(frozen=True)
class ApiRoute:
    method: str
    path: str
    scopes: tuple[str, ...]  # every ScopeCheck found in the route's dependency tree
    path_params: dict[str, Any]

    @property
    def scope(self) -> str:
        return max(self.scopes, key=SCOPES.index)

    def url(self) -> str:
        plain = re.sub(r"\{(\w+):\w+\}", r"{\1}", self.path)  # Starlette converters: {path:path} -> {path}
        return plain.format(**self.path_params)

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


def _route_contexts(app: FastAPI) -> list[Any]:
    """The app's routes with included routers flattened (FastAPI >= 0.16x includes routers lazily)."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # older FastAPI: app.routes is already flat
        return list(app.routes)
    return list(iter_route_contexts(app.routes))


def _scope_checks(dependant: Any) -> list[str]:
    found = []
    for sub in dependant.dependencies:
        if isinstance(sub.call, ScopeCheck):
            found.append(sub.call.scope)
        found += _scope_checks(sub)
    return found


def _sample(annotation: Any) -> Any:
    """A path value that names nothing: no run has this id, no token this name."""
    return 2_000_000_000 if annotation is int else f"no-such-{uuid.uuid4().hex[:6]}"


def api_routes(app: FastAPI) -> list[ApiRoute]:
    routes = []
    for context in _route_contexts(app):
        path = getattr(context, "path", "") or ""
        if not path.startswith("/api/"):
            continue
        original = getattr(context, "original_route", context)
        dependant = getattr(original, "dependant", None)
        assert dependant is not None, f"{path} is not a FastAPI route (a mount?): it cannot declare a scope"
        params = {p.name: _sample(p.field_info.annotation) for p in dependant.path_params}
        for method in sorted(context.methods or ()):
            if method != "HEAD":
                routes.append(ApiRoute(method, path, tuple(_scope_checks(dependant)), params))
    return routes


APP_ROUTES = api_routes(create_app(Settings(_env_file=None)))


def test_the_enumeration_sees_the_api() -> None:
    seen = {(r.method, r.path) for r in APP_ROUTES}
    assert {
        ("POST", "/api/v1/runs"),
        ("GET", "/api/v1/runs/{run_id}/heatmap.png"),
        ("GET", "/api/v1/compare"),
        ("DELETE", "/api/v1/runs/{run_id}"),
        ("GET", "/api/v1/auth/me"),
    } <= seen
    assert len(APP_ROUTES) >= 20


@pytest.mark.parametrize("route", APP_ROUTES, ids=str)
def test_every_api_route_declares_a_scope(route: ApiRoute) -> None:
    assert route.scopes, f"{route} has no require_scope(...) dependency: add dependencies=[READ|UPLOAD|ADMIN]"
    expected = EXPECTED_SCOPES.get((route.method, route.path))
    if expected is not None:
        assert route.scope == expected, f"{route} needs {expected}, declares {route.scope}"
    elif route.method == "GET":
        assert route.scope == "read", f"{route}: every GET is `read` unless listed in EXPECTED_SCOPES"
    elif route.scope == "read":
        assert (route.method, route.path) in READ_ONLY_WRITES, f"{route} changes state but needs only read"


# ------------------------------------------------------------------------------------------ the behaviour
@dataclass(frozen=True)
class Locked:
    client: TestClient
    tokens: dict[str, str]  # caller kind -> token


@pytest.fixture(scope="module", params=BACKENDS)
def locked(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Locked]:
    """The app on a private database holding one token per scope plus a revoked and an expired one."""
    root = tmp_path_factory.mktemp("auth-matrix")
    url = private_database(request.param, request, root)
    tokens = {scope: make_token(url, scope)[1] for scope in SCOPES}
    revoked_name, tokens["revoked"] = make_token(url, "admin")
    set_token_dates(url, revoked_name, revoked_at=in_the_past())
    expired_name, tokens["expired"] = make_token(url, "admin", expires_days=1)
    set_token_dates(url, expired_name, expires_at=in_the_past())
    settings = Settings(_env_file=None, data_dir=root / "data", database_url=url)
    with TestClient(create_app(settings)) as client:
        yield Locked(client, tokens)


def _call(locked: Locked, route: ApiRoute, headers: dict[str, str]):
    return locked.client.request(route.method, route.url(), headers=headers)


def _assert_error(response, status: int, error: str | None = None) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "detail"} and body["detail"], body
    if error is not None:
        assert body["error"] == error
    assert response.headers["www-authenticate"].startswith('Bearer realm="fp8-policy"')


UNKNOWN = "fp8p_00000000_" + "A" * 43
REJECTED = {  # caller kind -> (headers maker, expected error)
    "no token": (lambda t: {}, "TokenRequired"),
    "unknown token": (lambda t: bearer(UNKNOWN), "InvalidToken"),
    "not a bearer token": (lambda t: {"Authorization": f"Basic {t['admin']}"}, "InvalidToken"),
    "token not in our format": (lambda t: bearer("secret"), "InvalidToken"),
    "revoked token": (lambda t: bearer(t["revoked"]), "TokenRevoked"),
    "expired token": (lambda t: bearer(t["expired"]), "TokenExpired"),
}


@pytest.mark.parametrize("route", APP_ROUTES, ids=str)
@pytest.mark.parametrize("caller", list(REJECTED))
def test_rejected_callers_get_401(locked: Locked, route: ApiRoute, caller: str) -> None:
    headers, error = REJECTED[caller]
    response = _call(locked, route, headers(locked.tokens))
    _assert_error(response, 401, error)


@pytest.mark.parametrize("route", APP_ROUTES, ids=str)
@pytest.mark.parametrize("scope", SCOPES)
def test_a_token_passes_exactly_the_routes_its_scope_covers(locked: Locked, route: ApiRoute, scope: str) -> None:
    response = _call(locked, route, bearer(locked.tokens[scope]))
    if scope_allows(scope, route.scope):
        assert response.status_code not in (401, 403), f"{scope} token on {route}: {response.text}"
    else:
        _assert_error(response, 403, "InsufficientScope")
        assert f'scope="{route.scope}"' in response.headers["www-authenticate"]
        assert route.scope in response.json()["detail"]


@pytest.mark.parametrize("path", OPEN_PATHS)
def test_dashboard_health_and_docs_need_no_token(locked: Locked, path: str) -> None:
    assert locked.client.get(path).status_code == 200
