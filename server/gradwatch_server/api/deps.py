"""FastAPI dependencies: settings, engine, sessions and the caller's access.

Every route declares its access decision explicitly, with exactly one of:

- ``access: ReadAccess`` -- reads a project's data: a ``read`` token (when tokens are
  required); the handler then calls ``access.check(project, "read")`` on what it found;
- ``access: WriteAccess`` -- changes a project's data: a ``write`` token, then
  ``access.check(project, "write")``;
- ``dependencies=PUBLIC`` on the route decorator -- no token at all (health only).

``undecided_routes(app)`` lists the API routes that declare none of them;
``tests/server/test_auth_matrix.py`` fails on any, so a new route cannot ship without a
decision. (``AccessDep`` is the older, undeclared form: it authenticates but does not say
which scope the route needs, so it does not count as a decision.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

import fastapi.routing
from fastapi import Depends, FastAPI, Header, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from sqlalchemy.engine import Engine
from sqlmodel import Session

from gradwatch_server.auth import OPEN, Access, authenticate
from gradwatch_server.exceptions import RequestError
from gradwatch_server.read.status import StatusPolicy
from gradwatch_server.settings import Settings


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


def read_access(
    settings: SettingsDep,
    session: SessionDep,
    authorization: Annotated[str | None, Header()] = None,
) -> Access:
    """Access decision "read": 401 without a valid token, 403 for a write token."""
    return _scoped(get_access(settings, session, authorization), "read")


def write_access(
    settings: SettingsDep,
    session: SessionDep,
    authorization: Annotated[str | None, Header()] = None,
) -> Access:
    """Access decision "write": 401 without a valid token, 403 for a read token."""
    return _scoped(get_access(settings, session, authorization), "write")


def public() -> None:
    """Access decision "public": the route needs no token (declared, not forgotten)."""


def project_filter(access: Access, project: str | None) -> str | None:
    """The project a listing is limited to: a token's own (after checking a ``project``
    asked for), else the one asked for (``None``: every project)."""
    if access.project is not None:
        access.check(project or access.project, "read")
        return access.project
    return project


def _scoped(access: Access, scope: str) -> Access:
    if access.scope is not None and access.scope != scope:
        raise RequestError(
            403,
            f"this is a {access.scope} token of project {access.project!r}; "
            f"this request needs a {scope} token",
        )
    return access


DECISIONS: dict[Callable[..., Any], str] = {
    read_access: "read",
    write_access: "write",
    public: "public",
}


@dataclass(frozen=True)
class RouteInfo:
    """One route as the app serves it (prefixes and router-level dependencies applied)."""

    path: str
    methods: frozenset[str]
    api: bool  # a FastAPI APIRoute in the schema (else a plain route, mount or doc page)
    decision: str | None  # "read", "write" or "public" for an API route that declares one


def app_routes(app: FastAPI) -> list[RouteInfo]:
    """Every route of ``app``, routers included, flattened.

    FastAPI 0.16x keeps included routers as lazy entries of ``app.routes``, so walking
    ``app.routes`` alone would see none of the API; ``iter_route_contexts`` flattens them.
    """
    iterate = getattr(fastapi.routing, "iter_route_contexts", None)
    contexts: list[Any] = list(iterate(app.routes)) if iterate is not None else list(app.routes)
    out = []
    for ctx in contexts:
        route = getattr(ctx, "original_route", ctx)
        # a route left out of the schema (the offline Swagger UI/ReDoc pages) is listed as a
        # plain route: the tests hold those to the documentation's known paths
        api = isinstance(route, APIRoute) and route.include_in_schema
        dependant = getattr(ctx, "dependant", None) if api else None
        found = _decisions(dependant) if isinstance(dependant, Dependant) else set()
        out.append(
            RouteInfo(
                path=str(getattr(ctx, "path", None) or getattr(route, "path", repr(route))),
                methods=frozenset(getattr(ctx, "methods", None) or ()),
                api=api,
                decision=found.pop() if len(found) == 1 else None,
            )
        )
    return out


def _decisions(dependant: Dependant) -> set[str]:
    found = {DECISIONS[dependant.call]} if dependant.call in DECISIONS else set()
    for sub in dependant.dependencies:
        found |= _decisions(sub)
    return found


def undecided_routes(app: FastAPI) -> list[str]:
    """``"METHOD /path"`` of every API route without exactly one access decision."""
    return sorted(
        f"{method} {route.path}"
        for route in app_routes(app)
        if route.api and route.decision is None
        for method in route.methods
    )


def get_policy(settings: SettingsDep) -> StatusPolicy:
    """Thresholds for run status."""
    return StatusPolicy(stalled_after=settings.stalled_after, crashed_after=settings.crashed_after)


AccessDep = Annotated[Access, Depends(get_access)]
ReadAccess = Annotated[Access, Depends(read_access)]
WriteAccess = Annotated[Access, Depends(write_access)]
PUBLIC = [Depends(public)]
PolicyDep = Annotated[StatusPolicy, Depends(get_policy)]
