"""FastAPI dependencies: the request's unit of work and the app-wide objects on app.state."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from fp8_policy.db.session import session_scope
from fp8_policy.service.settings import Settings


def get_session(request: Request) -> Iterator[Session]:
    with session_scope(request.app.state.session_factory) as session:
        yield session


async def get_app_settings(request: Request) -> Settings:
    """`async`: an attribute read needs no threadpool hop (see limits.check_request)."""
    settings: Settings = request.app.state.settings
    return settings


# scope="function": the commit runs before the response is sent, so a failed commit becomes a 500
# instead of a 2xx for data that was never stored (house-style §7.5).
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
SettingsDep = Annotated[Settings, Depends(get_app_settings)]
