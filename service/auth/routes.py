"""HTTP routes for access tokens: who am I (`read`), and token management (`admin`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from fp8_policy.service.auth import actions
from fp8_policy.service.auth.deps import ADMIN, READ, PrincipalDep, app_hasher
from fp8_policy.service.auth.schemas import Me, TokenCreate, TokenCreated, TokenRead
from fp8_policy.service.auth.tokens import TokenHasher
from fp8_policy.service.deps import SessionDep
from fp8_policy.service.errors import ErrorBody

router = APIRouter(prefix="/api/v1", tags=["access tokens"])
AUTH_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {
        "model": ErrorBody,
        "description": "No token while tokens exist, or an unknown, revoked or "
        "expired one (TokenRequired, InvalidToken, TokenRevoked, "
        "TokenExpired).",
    },
    403: {"model": ErrorBody, "description": "InsufficientScope: the token's scope does not cover the route."},
}
HasherDep = Annotated[TokenHasher, Depends(app_hasher)]


@router.get("/auth/me", response_model=Me, dependencies=[READ], responses=AUTH_ERRORS)
def who_am_i(principal: PrincipalDep) -> Me:
    """The calling token's name and scope (the dashboard shows it)."""
    return Me(
        name=principal.name, scope=principal.scope, anonymous=principal.anonymous, expires_at=principal.expires_at
    )


@router.get("/tokens", response_model=list[TokenRead], dependencies=[ADMIN], responses=AUTH_ERRORS)
def list_tokens(session: SessionDep) -> list[TokenRead]:
    """Every token, revoked and expired ones included (never the token or its hash)."""
    return [TokenRead(**actions.token_info(t)) for t in actions.list_tokens(session)]


@router.post(
    "/tokens",
    status_code=201,
    response_model=TokenCreated,
    dependencies=[ADMIN],
    responses={400: {"model": ErrorBody}, 409: {"model": ErrorBody}, **AUTH_ERRORS},
)
def create_token(body: TokenCreate, session: SessionDep, hasher: HasherDep) -> JSONResponse:
    """Create a token; the answer carries it once (`token`)."""
    row, token = actions.create_token(session, hasher, body.name, body.scope, body.expires_days)
    created = TokenCreated(**actions.token_info(row), token=token)
    return JSONResponse(created.model_dump(mode="json"), status_code=201, headers={"Cache-Control": "no-store"})


@router.delete(
    "/tokens/{name}",
    response_model=TokenRead,
    dependencies=[ADMIN],
    responses={404: {"model": ErrorBody}, **AUTH_ERRORS},
)
def revoke_token(name: str, session: SessionDep) -> TokenRead:
    """Revoke a token (kept, as revoked, so runs it uploaded still name it)."""
    return TokenRead(**actions.token_info(actions.revoke_token(session, name)))
