"""FastAPI dependencies: settings, engine, sessions and the caller's access."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlalchemy.engine import Engine
from sqlmodel import Session

from gradwatch.server.auth import OPEN, Access, authenticate
from gradwatch.server.config import Settings
from gradwatch.server.status import StatusPolicy


def get_settings(request: Request) -> Settings:
    """The app's settings (set by ``create_app``)."""
    settings: Settings = request.app.state.settings
    return settings


def get_engine(request: Request) -> Engine:
    """The app's engine (built by ``create_app``)."""
    engine: Engine = request.app.state.engine
    return engine


def get_session(engine: Annotated[Engine, Depends(get_engine)]) -> Iterator[Session]:
    """A read session for one request."""
    with Session(engine) as session:
        yield session


SettingsDep = Annotated[Settings, Depends(get_settings)]
EngineDep = Annotated[Engine, Depends(get_engine)]
SessionDep = Annotated[Session, Depends(get_session)]


def get_access(
    settings: SettingsDep,
    session: SessionDep,
    authorization: Annotated[str | None, Header()] = None,
) -> Access:
    """Who calls: anyone when tokens are not required, else the token's project and scope."""
    if not settings.require_tokens:
        return OPEN
    return authenticate(session, authorization)


def get_policy(settings: SettingsDep) -> StatusPolicy:
    """Thresholds for run status."""
    return StatusPolicy(stalled_after=settings.stalled_after, crashed_after=settings.crashed_after)


AccessDep = Annotated[Access, Depends(get_access)]
PolicyDep = Annotated[StatusPolicy, Depends(get_policy)]
