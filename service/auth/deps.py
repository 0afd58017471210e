"""Request dependencies: who is calling (`authenticate`) and whether their scope covers the route
(`require_scope`). Every /api/ route declares one scope (tests/service/auth/test_auth_matrix.py enumerates the app's
routes and fails for one that does not).

Per request: a presented token costs one indexed lookup by prefix (plus an UPDATE of last_used_at at most once
a minute per token); a request without a token costs one EXISTS query over the token table, so tokens created
or revoked by another process (the `token` CLI, a second API process) take effect on the next request.
"""

from __future__ import annotations

import threading
from typing import Annotated

from fastapi import Depends, Request
from fastapi.params import Depends as DependsParam

from fp8_policy.service.auth import hosts
from fp8_policy.service.auth.actions import ANONYMOUS, Principal, tokens_required, verify_token
from fp8_policy.service.auth.tokens import SCOPES, TokenHasher, load_hasher, scope_allows
from fp8_policy.service.errors import Forbidden, InvalidToken, TokenRequired

_hasher_lock = threading.Lock()
SIGN_IN_HINT = (
    "send 'Authorization: Bearer <token>' (client and CLI: FP8_POLICY_TOKEN); an admin creates one with "
    "`fp8-policy token create --name NAME --scope read|upload|admin`"
)


def app_hasher(request: Request) -> TokenHasher:
    """The process's token hasher, loaded once (the key never changes while tokens exist)."""
    state = request.app.state
    hasher = getattr(state, "token_hasher", None)
    if hasher is None:
        with _hasher_lock:
            hasher = getattr(state, "token_hasher", None)
            if hasher is None:
                secret = state.settings.secret_key
                with state.unit_of_work() as session:
                    hasher = load_hasher(session, secret.get_secret_value() if secret else None)
                state.token_hasher = hasher
    return hasher


def authenticate(request: Request) -> Principal:
    """The caller: the Bearer token's principal; anonymous (every scope) only while no token exists, the
    service allows it (loopback or --allow-anonymous) and the request is addressed to a host an open service
    answers (service/auth/hosts.py: 403 HostNotAllowed otherwise). 401 otherwise."""
    state = request.app.state
    header = request.headers.get("authorization")
    if header is not None:
        scheme, _, credentials = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():
            raise InvalidToken("the Authorization header must read 'Bearer <token>'", invalid_token=True)
        hasher = app_hasher(request)
        with state.unit_of_work() as session:
            return verify_token(session, hasher, credentials.strip())
    with state.unit_of_work() as session:
        required = tokens_required(session)
    if required:
        raise TokenRequired(f"this service needs an access token: {SIGN_IN_HINT}")
    if not state.settings.allow_anonymous:
        raise TokenRequired(f"no access token exists yet and anonymous access is off for this address: {SIGN_IN_HINT}")
    host = request.headers.get("host")
    if not hosts.open_host_allowed(host, state.allowed_hosts):
        raise hosts.refusal(host or "")
    return ANONYMOUS


PrincipalDep = Annotated[Principal, Depends(authenticate)]


class ScopeCheck:
    """The dependency `require_scope` returns; `scope` is what the route needs (read by the route-matrix test)."""

    def __init__(self, scope: str) -> None:
        if scope not in SCOPES:
            raise ValueError(f"unknown scope {scope!r}")
        self.scope = scope

    async def __call__(self, request: Request, principal: PrincipalDep) -> Principal:
        # async: a comparison needs no threadpool hop (see limits.check_request)
        if not scope_allows(principal.scope, self.scope):
            route = request.scope.get("route")
            what = f"{request.method} {getattr(route, 'path', request.url.path)}"
            raise Forbidden(
                f"the token {principal.name!r} has scope {principal.scope}; {what} needs {self.scope}",
                needed_scope=self.scope,
            )
        return principal

    def __repr__(self) -> str:
        return f"require_scope({self.scope!r})"


def require_scope(scope: str) -> DependsParam:
    """`dependencies=[require_scope("upload")]` on a route or router: `read` < `upload` < `admin`."""
    return DependsParam(ScopeCheck(scope))  # what fastapi.Depends builds (it is typed as returning Any)


READ = require_scope("read")
UPLOAD = require_scope("upload")
ADMIN = require_scope("admin")
