"""API tokens: per project, scope ``write`` (collectors) or ``read`` (dashboards, CLI).

Only a token's SHA-256 is stored. On loopback no token is needed; a server bound to any
other address requires one on every request (``Settings.require_tokens``): no or an
unknown token is 401, a token of another project or scope is 403.

Example::

    with write_session(engine) as s:
        secret = create_token(s, project="vision", scope="write")   # print it once
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlmodel import Session, col

from gradwatch.server.errors import RequestError
from gradwatch.server.ingest import ensure_project
from gradwatch.server.models import Project, Token

SCOPES = ("read", "write")
PREFIX = "gw_"


@dataclass(frozen=True)
class Access:
    """Who is calling: ``project`` None means any project (no tokens required)."""

    project: str | None
    scope: str | None

    def check(self, project: str, scope: str) -> None:
        """403 unless this caller may use ``scope`` on ``project``."""
        if self.project is None:
            return
        if self.project != project or self.scope != scope:
            raise RequestError(
                403,
                f"this token is a {self.scope} token of project {self.project!r}; "
                f"this request needs a {scope} token of project {project!r}",
            )


OPEN = Access(None, None)


def digest(token: str) -> str:
    """The stored form of a token."""
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def create_token(session: Session, *, project: str, scope: str) -> str:
    """Create a token and return its secret (shown once, never stored)."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    secret = PREFIX + secrets.token_urlsafe(32)
    project_id = ensure_project(session, project)
    session.add(
        Token(project_id=project_id, scope=scope, digest=digest(secret), created_at=time.time())
    )
    return secret


def count_tokens(session: Session) -> int:
    """How many tokens exist (a non-loopback server refuses to start with none)."""
    return int(session.execute(select(func.count()).select_from(Token)).scalar_one())


def authenticate(session: Session, authorization: str | None) -> Access:
    """The caller behind an ``Authorization: Bearer <token>`` header, or 401."""
    if not authorization:
        raise RequestError(
            401, "this server requires an API token: send 'Authorization: Bearer <token>'"
        )
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise RequestError(401, "the Authorization header must be 'Bearer <token>'")
    row = session.execute(
        select(col(Token.scope), col(Project.name))
        .join(Project, col(Project.id) == col(Token.project_id))
        .where(col(Token.digest) == digest(token.strip()))
    ).first()
    if row is None:
        raise RequestError(401, "unknown API token; create one with gradwatch serve --create-token")
    return Access(project=str(row[1]), scope=str(row[0]))
